"""``setup``: the one command that creates or migrates the tables."""

from __future__ import annotations

from rich.text import Text

from ..operator import setup_database
from .failures import run
from .render import print_json, stdout
from .target import Target, connecting, ledger_command

# -- setup --------------------------------------------------------------------------


@ledger_command("setup")
def setup_command(target: Target) -> None:
    """Create or migrate the ledger and LangGraph's checkpoint tables in --db.

    The only console command that changes the schema (``list``, ``show``, ``resolve``
    and ``recover`` refuse a database without a ledger). A SQLite file is created if
    missing. Idempotent, and safe from many processes at once.
    """
    connecting(target, read_only=False)

    async def work() -> str:
        return await setup_database(target.db, schema=target.schema, connect_timeout=target.timeout)

    where = run(target, work)
    if target.json:
        print_json({"ledger": where, "set_up": True})
        return
    stdout().print(
        Text.assemble(("Set up: ", "bold green"), f"the ledger and the checkpoint tables in {where}."),
        soft_wrap=True,
    )
    stdout().print(Text(f"List what is unresolved: {target.command('list')}", style="dim"))

