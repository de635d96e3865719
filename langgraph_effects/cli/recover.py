"""``recover``: resume the threads a crash left mid-effect, and report what settled them."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.padding import Padding
from rich.text import Text

from ..core.exitcodes import HELP as EXIT_CODES_HELP
from .failures import EXIT_NEEDS_OPERATOR, EXIT_RESUME_FAILED, BadInput, fail, run
from .graphs import build_graph, load_graph_factory, parse_configurable
from .render import STATE_STYLES, print_json, stdout
from .target import Target, ledger_command, open_checkpointer, parse_duration

if TYPE_CHECKING:
    from ..operator import OperationReport, RecoveryReport

# -- recover ------------------------------------------------------------------------

RECOVER_EXIT_CODES_HELP = (
    EXIT_CODES_HELP
    + " For recover: 0 also when a thread is left alone because a worker is sending it now; "
    "2 also for a bad --graph or a factory that fails; 6 when an operation awaits review or "
    "approval, a thread is paused at another interrupt, or cannot be resumed."
)

_HOW_TEXT = {
    "confirmed_by_lookup": ("confirmed by lookup", "green"),
    "settled_by_dedup": ("settled by dedup", "green"),
    "resent_under_key": ("re-sent under key", "green"),
    "sent": ("sent", "green"),
    "confirmed": ("confirmed", "green"),
    "sent_to_review": ("sent to review", "bold magenta"),
    "awaiting_review": ("awaiting review", "bold magenta"),
    "decided_by_operator": ("decided by operator", "green"),
    "replayed": ("replayed", "green"),
    "failed": ("failed", "red"),
    "in_flight_elsewhere": ("in flight elsewhere", "blue"),
    "unsettled": ("unsettled", "bold yellow"),
    "not_resumed": ("not resumed", "dim"),
    "would_resume": ("would resume", "cyan"),
}

_ACTION_STYLES = {
    "resumed": "bold green",
    "would_resume": "bold cyan",
    "in_flight_elsewhere": "bold blue",
    "recently_active": "bold yellow",
    "awaiting_review": "bold magenta",
    "paused_at_other_interrupt": "bold yellow",
    "not_resumable": "bold yellow",
    "failed": "bold red",
    "nothing_to_do": "dim",
}




GraphOption = Annotated[
    str,
    typer.Option(
        "--graph",
        metavar="MODULE:ATTR",
        help="A factory `def make_graph(checkpointer)` returning the compiled graph that ran the "
        "threads, compiled with the checkpointer it is given (the console opens it for --db).",
        show_default=False,
    ),
]
ThreadsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--thread",
        metavar="THREAD",
        help="Only this thread (repeatable). Default: every thread with an unresolved operation "
        "or an out-of-band verdict not yet answered.",
        show_default=False,
    ),
]
OwnTenantOption = Annotated[str | None, typer.Option("--tenant", help="Only operations of this tenant.")]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Report what would be resumed; resume and write nothing.")
]
MinIdleOption = Annotated[
    str,
    typer.Option(
        "--min-idle",
        metavar="SECONDS",
        help="Leave a thread alone until it has been still this long, unless an expired lease "
        "proves its worker gone (30, 2m; 0 when no other worker can be running).",
    ),
]
LeaseGraceOption = Annotated[
    str,
    typer.Option(
        "--lease-grace",
        metavar="SECONDS",
        help="Extra time past a lease's expiry before its sender counts as gone (clock skew).",
    ),
]
VerdictsWithinOption = Annotated[
    str,
    typer.Option(
        "--verdicts-within",
        metavar="SECONDS",
        help="Look for out-of-band verdicts the graph has not answered among operations changed "
        "this recently (7d, 12h; 'all' for the whole history). Older ones are answered by the "
        "thread's next run, or by naming it with --thread.",
    ),
]
ConfigurableOption = Annotated[
    list[str] | None,
    typer.Option(
        "--configurable",
        "-c",
        metavar="KEY=VALUE",
        help="A configurable entry for the resumes, e.g. policy_version=v7 (repeatable).",
        show_default=False,
    ),
]


@ledger_command("recover", epilog=RECOVER_EXIT_CODES_HELP)
def recover_command(
    target: Target,
    graph: GraphOption,
    thread: ThreadsOption = None,
    tenant: OwnTenantOption = None,
    dry_run: DryRunOption = False,
    min_idle: MinIdleOption = "30s",
    lease_grace: LeaseGraceOption = "0",
    verdicts_within: VerdictsWithinOption = "7d",
    configurable: ConfigurableOption = None,
) -> None:
    """Resume threads a crash left mid-effect, once each, and report what settled them.

    --graph names a factory in your code, `def make_graph(checkpointer)`, that builds the
    graph that ran the threads and compiles it with the checkpointer it is given
    (`builder.compile(checkpointer=checkpointer)`); it may be async. The console opens
    that checkpointer for --db (AsyncEffectSqliteSaver for a SQLite path, AsyncEffectPostgresSaver
    for a postgresql:// DSN) and resumes each thread once, with durability="sync", under
    the tenant its operations were recorded with. A thread with an operation under a live
    lease is left alone (someone is sending it right now).
    """
    from ..operator import recover

    try:
        factory = load_graph_factory(graph)
        options: dict[str, Any] = {
            "tenant": tenant,
            "thread_ids": thread or None,
            "dry_run": dry_run,
            "min_idle": parse_duration(min_idle),
            "lease_grace": parse_duration(lease_grace),
            "verdicts_within": None
            if verdicts_within.strip().lower() == "all"
            else parse_duration(verdicts_within),
        }
        extra = parse_configurable(configurable or [])
    except BadInput as error:
        fail(error, target.json)
    options["config"] = {"configurable": extra} if extra else None

    async def work() -> RecoveryReport:
        async with open_checkpointer(target) as saver:
            built = await build_graph(factory, saver, graph)
            return await recover(built, ledger=saver.ledger, **options)

    report = run(target, work)
    if target.json:
        print_json(report.to_json())
    else:
        _render_recovery(report, target)
    if report.failed:
        raise typer.Exit(EXIT_RESUME_FAILED)
    if report.needs_operator:
        raise typer.Exit(EXIT_NEEDS_OPERATOR)


def _render_recovery(report: RecoveryReport, target: Target) -> None:
    console = stdout()
    head = "Recovery (dry run)" if report.dry_run else "Recovery"
    if not report.threads and not report.compensations:
        console.print(
            Text.assemble((f"{head}: ", "bold"), ("nothing to do", "green"), f" in {report.ledger}: "
                          "no thread needs recovery.")
        )
        return
    counts = report.counts()
    verb = "would resume" if report.dry_run else "resumed"
    moved = counts.get("resumed", 0) + counts.get("would_resume", 0)
    line = Text.assemble(
        (f"{head} of {report.ledger}: ", "bold"),
        f"{len(report.threads)} thread(s) looked at, {moved} {verb}",
    )
    if report.nothing_to_do:
        line.append(" (nothing to do)", "green")
    console.print(line)
    for t in report.threads:
        console.print()
        title = Text.assemble(("thread ", "bold"), (t.thread_id, "bold"))
        if t.tenant:
            title.append(f" (tenant {t.tenant})", "dim")
        title.append(": ")
        title.append(t.action.replace("_", " "), _ACTION_STYLES.get(t.action, "bold"))
        if t.outcome:
            title.append(f" -> {t.outcome}", "bold red" if t.outcome == "error" else "bold")
            title.append(f" in {t.seconds:.1f}s", "dim")
        console.print(title)
        console.print(Text(f"  {t.reason}", style="dim"), soft_wrap=True)
        if t.error:
            console.print(Text.assemble(("  error: ", "bold red"), t.error), soft_wrap=True)
        for op in t.operations:
            console.print(_recovery_line(op))
            console.print(Padding(Text(op.detail, style="dim"), (0, 0, 0, 4)))
    for c in report.compensations:
        console.print(
            Text.assemble(
                ("compensation ", "bold"),
                f"of {c.operation.op_id} ({c.operation.tool}): ",
                (c.state, "bold green" if c.state == "undone" else "bold yellow"),
                f" ({c.reason})" + (f": {c.error}" if c.error else ""),
            ),
            soft_wrap=True,
        )
    needs = report.awaiting_review
    if needs:
        console.print()
        console.print(
            Text(
                f"{len(needs)} operation(s) wait for an operator: check the provider, then\n"
                + "\n".join(f"  {target.command('show', shlex.quote(op_id))}" for op_id in needs)
                + f"\nand record a verdict with `{target.command('resolve', '...')}` (show prints it "
                f"in full); run `{target.command('recover', '--graph', '...')}` again to resume "
                "the thread.",
                style="bold magenta",
            )
        )


def _recovery_line(op: OperationReport) -> Text:
    line = Text("  ")
    line.append(op.op_id, "bold")
    line.append(f"  {op.tool}  ")
    if op.before is None:
        line.append("new", "dim")
    else:
        line.append(op.before.state.value, STATE_STYLES[op.before.state])
        line.append(f" v{op.before.version}", "dim")
    line.append(" -> ")
    line.append(op.after.state.value, STATE_STYLES[op.after.state])
    line.append(f" v{op.after.version}  ", "dim")
    label, style = _HOW_TEXT.get(op.how, (op.how, "bold"))
    line.append(label, style)
    return line

