"""``purge``, ``erase`` and ``deletions``: a ledger kept for years (retention, a
person's data erased, and the threads deleted by force).

``purge`` and ``erase`` are dry runs unless ``--yes`` is given: they say what they
would do and write nothing. See docs/lifecycle.md.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.text import Text

from ..operator import erase, forced_deletions, purge
from .app import ActorOption, default_actor
from .failures import BadInput, fail, run
from .render import print_json, stdout, when
from .target import Target, ledger_command, open_target, parse_duration

YesOption = Annotated[
    bool, typer.Option("--yes", help="Do it (without --yes: a dry run that only reports).")
]
BatchOption = Annotated[
    int,
    typer.Option(
        "--batch-size", min=1, help="Rows per transaction (each batch commits on its own).",
    ),
]


@ledger_command("purge")
def purge_command(
    target: Target,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Remove settled operations last changed longer ago than this: 90d, 12h, 3600.",
            show_default=False,
        ),
    ],
    yes: YesOption = False,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's operations.")] = None,
    batch_size: BatchOption = 500,
) -> None:
    """Remove settled operations (confirmed, failed, abandoned) older than --older-than,
    with their audit rows and budget holds, in small batches. Unresolved operations are
    never removed, nor settled ones whose provider may still honour their key (their
    dedup window). Not LangGraph's checkpoint ``prune``: checkpoints are left alone.
    """
    try:
        window = parse_duration(older_than)
        if not window > 0:
            raise BadInput(f"--older-than {older_than!r} must be longer than zero (e.g. 90d).")
    except BadInput as error:
        fail(error, target.json, target)

    async def work() -> Any:
        async with open_target(target, read_only=not yes) as ledger:
            return await purge(ledger, window, dry_run=not yes, tenant=tenant, batch_size=batch_size)

    report = run(target, work)
    if target.json:
        print_json(report.to_json())
        return
    verb = "Removed" if yes else "Would remove"
    lines = [f"{verb} {len(report.removed)} settled operation(s) last changed over {older_than} ago."]
    if report.kept_in_dedup_window:
        lines.append(
            f"Kept {len(report.kept_in_dedup_window)} whose provider may still honour their key "
            "(dedup window not over yet)."
        )
    if report.kept_undo_pending:
        lines.append(f"Kept {len(report.kept_undo_pending)} whose undo is not settled yet.")
    if not yes and report.removed:
        lines.append("Dry run: nothing was removed. Run again with --yes to remove them.")
    stdout().print(Text("\n".join(lines)))


@ledger_command("erase")
def erase_command(
    target: Target,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Erase this tenant's data.")] = None,
    thread: Annotated[str | None, typer.Option("--thread", help="Erase this thread's data.")] = None,
    yes: YesOption = False,
    actor: ActorOption = None,
) -> None:
    """Erase the arguments, results and notes of one tenant's (--tenant) or one thread's
    (--thread) settled operations. Ids, states, keys and times stay, and each erasure is
    in the operation's audit trail (who, when). Unresolved operations are left as they
    are (settle them, then erase again).
    """
    if (tenant is None) == (thread is None):
        usage = BadInput("give exactly one of --tenant T and --thread ID (whose data to erase).")
        fail(usage, target.json, target)
    who = actor or default_actor()

    async def work() -> Any:
        async with open_target(target, read_only=not yes) as ledger:
            return await erase(ledger, tenant=tenant, thread_id=thread, actor=who, dry_run=not yes)

    report = run(target, work)
    if target.json:
        print_json(report.to_json())
        return
    whose = f"tenant {tenant!r}" if tenant is not None else f"thread {thread!r}"
    verb = "Erased" if yes else "Would erase"
    lines = [f"{verb} the data of {len(report.erased)} settled operation(s) of {whose}."]
    if report.already_erased:
        lines.append(f"{len(report.already_erased)} were erased before.")
    if report.unresolved:
        lines.append(
            f"Left {len(report.unresolved)} unresolved operation(s) as they are: "
            f"{', '.join(report.unresolved[:10])}. Settle them, then erase again."
        )
    if not yes and report.erased:
        lines.append("Dry run: nothing was erased. Run again with --yes to erase.")
    stdout().print(Text("\n".join(lines)))


@ledger_command("deletions")
def deletions_command(
    target: Target,
    thread: Annotated[str | None, typer.Option("--thread", help="Only this thread's deletions.")] = None,
) -> None:
    """List the threads deleted by force while some of their operations were unresolved
    (``delete_thread(force=True)``): who decided, when, and what those operations were.
    The record stays after the operations are gone. Read-only.
    """

    async def work() -> Any:
        async with open_target(target, read_only=True) as ledger:
            return await forced_deletions(ledger, thread_id=thread)

    found = run(target, work)
    if target.json:
        print_json({"deletions": [d.to_json() for d in found]})
        return
    if not found:
        stdout().print(Text("No thread was deleted with unresolved operations."))
        return
    now = time.time()
    lines: list[str] = []
    for deletion in found:
        lines.append(
            f"thread {deletion.thread_id!r} deleted by {deletion.actor} at {when(deletion.at, now).plain}, "
            f"forced, with {len(deletion.operations)} unresolved operation(s):"
        )
        lines.extend(
            f"  {op['operation_id']} ({op['state']}, {op['tool']}, key {op['provider_key']})"
            for op in deletion.operations
        )
    stdout().print(Text("\n".join(lines)))
