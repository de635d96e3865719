"""``resolve``: record an operator's verdict, bound to the version they saw."""

from __future__ import annotations

import json
import shlex
from typing import Annotated, Any

import typer
from rich.text import Text

from ..operator import VerdictReport, lease_status, new_decision_id, resolve_report
from .app import ActorOption, OperationArgument, TenantOption, default_actor
from .failures import BadInput, fail, run
from .render import STATE_STYLES, print_json, stdout
from .target import Target, ledger_command, open_target

_WHAT_NEXT = {
    "landed": "the graph answers the model with an 'effect landed' message on its next resume",
    "not_landed": (
        "it is pending again: the graph sends it again under the same provider key on its next resume"
    ),
    "abandon": (
        "the graph tells the model the effect was not confirmed and must not be retried "
        "unless asked, on its next resume"
    ),
}


# -- resolve ------------------------------------------------------------------------


ExpectedVersionOption = Annotated[
    int,
    typer.Option(
        "--expected-version",
        min=1,
        help="The version you saw (`show` prints it). Refused if it changed since.",
        show_default=False,
    ),
]
LandedOption = Annotated[bool, typer.Option("--landed", help="You checked: the effect landed.")]
ReceiptOption = Annotated[
    str | None,
    typer.Option("--receipt", metavar="JSON", help="With --landed: what the provider shows, as JSON."),
]
NotLandedOption = Annotated[
    bool,
    typer.Option("--not-landed", help="You checked: it did not land; send again under the same key."),
]
AbandonOption = Annotated[bool, typer.Option("--abandon", help="Close it without confirming the effect.")]
ReasonOption = Annotated[str | None, typer.Option("--reason", help="With --abandon: why (for the audit).")]
DecisionIdOption = Annotated[
    str | None,
    typer.Option(
        "--decision-id",
        help="Idempotency id of this verdict; re-run with the same id to retry safely. "
        "Default: a fresh one (printed).",
    ),
]


@ledger_command("resolve")
def resolve_command(
    target: Target,
    operation: OperationArgument,
    expected_version: ExpectedVersionOption,
    landed: LandedOption = False,
    receipt: ReceiptOption = None,
    not_landed: NotLandedOption = False,
    abandon: AbandonOption = False,
    reason: ReasonOption = None,
    decision_id: DecisionIdOption = None,
    actor: ActorOption = None,
    tenant: TenantOption = None,
) -> None:
    """Record a verdict: --landed [--receipt JSON] | --not-landed | --abandon --reason TEXT."""
    use_json = target.json
    try:
        verdict = verdict_from_flags(landed, receipt, not_landed, abandon, reason)
    except BadInput as error:
        fail(error, use_json)
    did = decision_id or new_decision_id()
    who = actor or default_actor()

    async def work() -> VerdictReport:
        async with open_target(target, read_only=False) as ledger:
            return await resolve_report(
                ledger,
                operation,
                verdict,
                expected_version=expected_version,
                decision_id=did,
                actor=who,
                tenant=tenant,
                channel="console",
            )

    report = run(target, work)
    if use_json:
        print_json(report.to_json())
        return
    _render_verdict_report(report, verdict, target)


def verdict_from_flags(
    landed: bool, receipt: str | None, not_landed: bool, abandon: bool, reason: str | None
) -> dict[str, Any]:
    """The verdict ``resolve``'s flags give, as `resolve_report` takes it (also ``compensate
    --landed``'s); `BadInput` for flags that give none or more than one."""
    chosen = [
        name
        for name, on in (("--landed", landed), ("--not-landed", not_landed), ("--abandon", abandon))
        if on
    ]
    if len(chosen) != 1:
        got = " and ".join(chosen) if chosen else "none"
        raise BadInput(f"give exactly one of --landed, --not-landed, --abandon (got {got}).")
    if receipt is not None and not landed:
        raise BadInput("--receipt goes with --landed only.")
    if reason is not None and not abandon:
        raise BadInput("--reason goes with --abandon only.")
    if landed:
        value: Any = None
        if receipt is not None:
            try:
                value = json.loads(receipt)
            except json.JSONDecodeError as error:
                raise BadInput(
                    f"--receipt is not valid JSON ({error.msg} at column {error.colno}): "
                    f'{receipt!r}. Quote it for the shell, e.g. --receipt \'{{"id": "r1"}}\'; '
                    "a plain string needs JSON quotes too: --receipt '\"r1\"'."
                ) from error
        return {"type": "landed", "receipt": value}
    if not_landed:
        return {"type": "not_landed"}
    if not reason or not reason.strip():
        raise BadInput("--abandon needs --reason TEXT (it goes into the audit trail).")
    return {"type": "abandon", "reason": reason}


def _render_verdict_report(report: VerdictReport, verdict: dict[str, Any], target: Target) -> None:
    console = stdout()
    op = report.operation
    if report.replayed:
        console.print(
            Text.assemble(
                ("Already recorded: ", "bold green"),
                f"decision id {report.decision_id} was applied to {op.op_id} before; nothing changed. It is ",
                (op.state.value, STATE_STYLES[op.state]),
                f" at version {op.version}.",
            ),
            soft_wrap=True,
        )
        if lease_status(op) != "live" and op.state.value in ("unknown", "review", "dispatched"):
            console.print(
                Text(
                    f"  It is in doubt again: `{target.command('show', shlex.quote(op.op_id))}`, "
                    "then resolve it anew, with a new decision id.",
                    style="yellow",
                )
            )
        return
    line = Text.assemble(
        ("Recorded ", "bold green"),
        (verdict["type"], "bold"),
        f" for {op.op_id}: ",
        (report.from_state.value, STATE_STYLES[report.from_state]),
        " -> ",
        (op.state.value, STATE_STYLES[op.state]),
        f", now version {op.version}.",
    )
    console.print(line)
    if report.lease_lost:
        console.print(
            Text(
                "  Its sender was gone: the lost lease was recorded first (dispatched -> unknown).",
                style="dim",
            )
        )
    console.print(Text(f"  decision id {report.decision_id} (re-run with it to retry safely)"))
    console.print(Text(f"  Next: {_WHAT_NEXT[verdict['type']]}.", style="dim"))

