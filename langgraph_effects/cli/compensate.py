"""``compensate`` and ``compensations``: undo an effect that landed, and list the undos."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from .._runtime.targets import load_target
from ..core.compensation import undo_state
from ..core.contract import Effect
from ..errors import TargetNotFoundError
from ..operator import (
    CompensationReport,
    compensate,
    compensations,
    compensations_to_json,
    new_decision_id,
    resolve_report,
)
from .app import ActorOption, OperationArgument, TenantOption, default_actor
from .failures import EXIT_NEEDS_OPERATOR, BadInput, fail, run
from .render import STATE_STYLES, print_json, stdout
from .resolve import ReceiptOption, verdict_from_flags
from .target import Target, ledger_command, open_target

EffectsOption = Annotated[
    str,
    typer.Option(
        "--effects",
        metavar="MODULE:ATTR",
        help="The tool contracts the graph runs with: a mapping tool name -> Effect (the "
        "effects= of EffectToolNode/EffectMiddleware), or a function returning one. The "
        "effect's tool must declare Effect(compensate=...).",
        show_default=False,
    ),
]
LandedUndoOption = Annotated[
    bool,
    typer.Option(
        "--landed",
        help="The operation is in doubt (unknown/review) and you checked: it landed. Records "
        "that verdict (with --expected-version), then undoes it.",
    ),
]
VersionOption = Annotated[
    int | None,
    typer.Option("--expected-version", min=1, help="With --landed: the version you saw.", show_default=False),
]
WhyOption = Annotated[str | None, typer.Option("--reason", help="Why it must not stand (for the audit).")]
AllOption = Annotated[bool, typer.Option("--all", help="Also the finished ones (undone, failed).")]


def load_effects(name: str) -> dict[str, Effect]:
    """The mapping ``--effects MODULE:ATTR`` names (called first if it is a function)."""
    try:
        found: Any = load_target(name)
    except TargetNotFoundError as error:
        raise BadInput(f"--effects {name}: {error.reason}") from error
    if callable(found) and not isinstance(found, Mapping):
        found = found()
    if not isinstance(found, Mapping) or not all(isinstance(e, Effect) for e in found.values()):
        raise BadInput(
            f"--effects {name} must name a mapping of tool name -> Effect (or a function returning "
            "one), the effects= the graph's EffectToolNode or EffectMiddleware is built with."
        )
    return {str(k): v for k, v in found.items()}


@ledger_command("compensate")
def compensate_command(
    target: Target,
    operation: OperationArgument,
    effects: EffectsOption,
    landed: LandedUndoOption = False,
    receipt: ReceiptOption = None,
    expected_version: VersionOption = None,
    reason: WhyOption = None,
    actor: ActorOption = None,
    tenant: TenantOption = None,
) -> None:
    """Undo an effect that landed, exactly once (its tool's Effect(compensate=...))."""
    use_json = target.json
    try:
        contracts = load_effects(effects)
        verdict = _landed_verdict(landed, receipt, expected_version)
    except BadInput as error:
        fail(error, use_json)
    who = actor or default_actor()

    async def work() -> CompensationReport:
        async with open_target(target, read_only=False) as ledger:
            if verdict is not None and expected_version is not None:
                await resolve_report(
                    ledger, operation, verdict, expected_version=expected_version,
                    decision_id=new_decision_id(), actor=who, tenant=tenant, channel="console",
                )
            return await compensate(
                ledger, operation, effects=contracts, actor=who, reason=reason,
                channel="console", tenant=tenant,
            )

    report = run(target, work)
    if use_json:
        print_json(report.to_json())
    else:
        _render(report, target)
    if report.undo is None or report.undo.state.value in ("review", "failed", "unknown"):
        raise typer.Exit(EXIT_NEEDS_OPERATOR)


def _landed_verdict(landed: bool, receipt: str | None, version: int | None) -> dict[str, Any] | None:
    if not landed:
        if receipt is not None or version is not None:
            raise BadInput("--receipt and --expected-version go with --landed only.")
        return None
    if version is None:
        raise BadInput("--landed needs --expected-version (the version `show` printed).")
    verdict = verdict_from_flags(True, receipt, False, False, None)
    return {**verdict, "undo": True}


def _render(report: CompensationReport, target: Target) -> None:
    console = stdout()
    op, undo = report.operation, report.undo
    if undo is None:
        then = target.command(
            "compensate", shlex.quote(op.op_id), "--landed", "--expected-version", str(op.version),
            "--effects", "MODULE:ATTR",
        )
        console.print(
            Text.assemble(
                ("Sent to review: ", "bold magenta"),
                f"{op.op_id} ({op.tool}): {report.reason}. Check with the provider, then `{then}`.",
            ),
            soft_wrap=True,
        )
        return
    console.print(
        Text.assemble(
            ("Compensation ", "bold"),
            (report.state, "bold green" if report.state == "undone" else "bold yellow"),
            f": {op.tool} {op.op_id} is undone by {undo.tool} {undo.op_id} (",
            (undo.state.value, STATE_STYLES[undo.state]),
            f", provider key {undo.provider_key}).",
        ),
        soft_wrap=True,
    )
    if report.error:
        console.print(Text(f"  The undo raised: {report.error}", style="red"), soft_wrap=True)
    if undo.state.value in ("review", "unknown", "dispatched"):
        console.print(
            Text(f"  It is in doubt: `{target.command('show', shlex.quote(undo.op_id))}`.", style="yellow"),
            soft_wrap=True,
        )


@ledger_command("compensations")
def compensations_command(target: Target, all_: AllOption = False, tenant: TenantOption = None) -> None:
    """List compensations: each undo, the effect it undoes, and how it stands."""

    async def work() -> list[Any]:
        async with open_target(target, read_only=True) as ledger:
            return await compensations(ledger, tenant=tenant, unfinished=not all_)

    pairs = run(target, work)
    if target.json:
        print_json(compensations_to_json(pairs))
        return
    console = stdout()
    if not pairs:
        console.print("No compensations" + (" yet." if all_ else " unfinished."))
        return
    table = Table("undo", "state", "compensation", "undoes", "tool", "attempts")
    for undo, effect in pairs:
        table.add_row(
            undo.op_id,
            Text(undo.state.value, style=STATE_STYLES[undo.state]),
            undo_state(undo),
            str(undo.compensates),
            f"{effect.tool if effect else '?'} -> {undo.tool}",
            str(undo.attempts),
        )
    console.print(table)
