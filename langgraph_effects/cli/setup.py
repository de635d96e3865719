"""``setup``: the one command that creates or migrates the tables."""

from __future__ import annotations

import typer
from rich.text import Text

from ..exitcodes import HELP as EXIT_CODES_HELP
from ..operator import setup_database
from .app import DbOption, JsonOption, SchemaOption, TimeoutOption, app
from .failures import run
from .render import print_json, stdout
from .target import connecting, settings

# -- setup --------------------------------------------------------------------------


@app.command("setup", epilog=EXIT_CODES_HELP)
def setup_command(
    ctx: typer.Context,
    db: DbOption = None,
    schema: SchemaOption = None,
    connect_timeout: TimeoutOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create or migrate the ledger and LangGraph's checkpoint tables in --db.

    The only console command that changes the schema (``list``, ``show``, ``resolve``
    and ``recover`` refuse a database without a ledger). A SQLite file is created if
    missing. Idempotent, and safe from many processes at once.
    """
    target = settings(ctx, db, json_output, schema, connect_timeout)
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

