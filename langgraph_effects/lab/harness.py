"""One cell of the lab: a strategy, a provider and a crash point, over N operations.

Every operation is its own thread. The first attempt of every K-th operation is
armed with the cell's fault; a killed worker is reaped (its exit must be our
SIGKILL) and replaced, and the thread is resumed once with
``graph.ainvoke(None, config)``, exactly like the seed's single retry (by two
workers at once in the ``duplicate`` column). If the graph then waits on an
operator, the strategy's ``answer_review`` answers with the provider's truth.

The counts come from the provider's own records, never from the worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from .faults import CRASH_POINTS, AttemptFaults, CrashPoint
from .providers import Provider, ProviderMode
from .strategies import CellFiles, CellReport, ReviewCase, Strategy
from .worker import (
    Attempt,
    AttemptReport,
    Done,
    Killed,
    ProviderSettings,
    WorkerError,
    WorkerHandle,
    WorkerSpec,
    drive,
)

#: Review rounds per operation before the lab gives up and leaves it pending.
MAX_REVIEW_ROUNDS = 3


def operation_label(index: int) -> str:
    """The logical operation the provider's records are grouped by."""
    return f"tenant-lab:notification:{index}"


@dataclass(frozen=True)
class Cell:
    """What to run: one row x one column of the table."""

    strategy: Strategy
    provider: ProviderMode
    crash_point: CrashPoint
    ops: int
    kill_every: int
    phase: int = 0
    """Operation i is faulted when ``i % kill_every == phase``."""
    settings: ProviderSettings = field(default_factory=ProviderSettings)

    @property
    def name(self) -> str:
        return f"{self.strategy.name}--{self.provider}--{self.crash_point.name}"

    def faulted(self, index: int) -> bool:
        point = self.crash_point
        armed = point.first_kill is not None or point.first_timeout
        return armed and index % self.kill_every == self.phase


@dataclass
class CellResult:
    """One cell's measurements.

    ``sends`` to ``withdrawn`` come from the provider's own records; the review
    counts from the harness; ``non_terminal`` from the strategy's audit (``None``
    for strategies that keep no states to audit, i.e. the seed rows).
    """

    strategy: str
    provider: str
    crash_point: str
    ours: bool
    intended: int = 0
    faulted: int = 0  # operations whose first attempt was armed
    kills: int = 0  # workers that died by SIGKILL at an armed point
    sends: int = 0  # apply requests the provider received (replays included)
    lookups: int = 0  # get + list requests
    effects: int = 0  # effects applied (withdrawn ones included: they landed)
    duplicates: int = 0  # effects beyond the first of an operation
    missing: int = 0  # intended operations with no effect at all
    withdrawn: int = 0
    sent_to_review: int = 0  # operations that ended up waiting on an operator
    reviews_answered: int = 0  # answers the lab gave (Command(resume=...))
    pending_reviews: int = 0  # operations still waiting when the lab gave up
    non_terminal: int | None = None
    tool_errors: int = 0  # error ToolMessages in the threads' final states
    seconds: float = 0.0
    faulted_operations: list[int] = field(default_factory=list)
    audit: dict[str, int] = field(default_factory=dict)  # the strategy's audit details
    check_failures: list[str] = field(default_factory=list)  # the strategy's own invariants
    error: str | None = None  # why the cell could not run (a harness failure)

    def violations(self) -> list[str]:
        """Why this row breaks the product's invariants (0 dup, 0 missing, 0 open)."""
        problems = []
        if self.error:
            problems.append("the cell did not run to the end")
        if self.duplicates:
            problems.append(f"{self.duplicates} duplicate effects")
        if self.missing:
            problems.append(f"{self.missing} missing operations")
        if self.non_terminal is None:
            problems.append("no audit of non-terminal operations")
        elif self.non_terminal:
            problems.append(f"{self.non_terminal} operations left non-terminal")
        if self.pending_reviews:
            problems.append(f"{self.pending_reviews} reviews left unanswered")
        problems.extend(self.check_failures)
        return problems

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        row["violations"] = self.violations() if self.ours else []
        return row


class _Workers:
    """The cell's current worker, replaced whenever one is killed."""

    def __init__(self, ctx: ForkServerContext, spec: WorkerSpec) -> None:
        self.ctx, self.spec = ctx, spec
        self.current = WorkerHandle(ctx, spec)
        self.extra: list[WorkerHandle] = []

    def spawn(self) -> WorkerHandle:
        handle = WorkerHandle(self.ctx, self.spec)
        self.extra.append(handle)
        return handle

    def run(self, attempt: Attempt) -> Done | Killed:
        outcome = drive([(self.current, attempt)])[0]
        if isinstance(outcome, Killed):
            self.current = WorkerHandle(self.ctx, self.spec)
        return outcome

    def close(self) -> None:
        for handle in [self.current, *self.extra]:
            handle.close()
        self.extra.clear()


def run_cell(
    ctx: ForkServerContext,
    cell: Cell,
    workdir: Path,
    *,
    on_operation: Callable[[], None] = lambda: None,
) -> CellResult:
    """Run one cell in ``workdir`` (created; must be empty) and count its effects."""
    started = time.perf_counter()
    point, strategy = cell.crash_point, cell.strategy
    result = CellResult(strategy.name, cell.provider, point.name, strategy.ours)
    files = CellFiles.under(workdir)
    workdir.mkdir(parents=True, exist_ok=False)
    provider = cell.settings.open(files, cell.provider).setup()
    spec = WorkerSpec(
        strategy=strategy.name,
        build=strategy.build,
        provider_mode=cell.provider,
        provider_settings=cell.settings,
        crash_point=point.name,
        files=files,
    )
    workers = _Workers(ctx, spec)
    labels = [operation_label(i) for i in range(1, cell.ops + 1)]
    try:
        for index, label in enumerate(labels, start=1):
            _run_operation(cell, workers, provider, result, index, label)
            on_operation()
    except WorkerError as exc:
        result.error = str(exc)
    finally:
        workers.close()
    tally = provider.tally(labels)
    result.intended = tally.intended
    result.sends, result.lookups = tally.sends, tally.lookups
    result.effects, result.duplicates, result.missing = (
        tally.effects,
        tally.duplicates,
        tally.missing,
    )
    result.withdrawn = tally.withdrawn
    if result.error is None:
        audit = strategy.audit(files) if strategy.audit is not None else None
        if audit is not None:
            result.non_terminal = audit.non_terminal
            result.audit = dict(audit.details)
        if strategy.check is not None:
            report = CellReport(
                files=files,
                provider_mode=cell.provider,
                crash_point=point.name,
                intended=result.intended,
                faulted=result.faulted,
                kills=result.kills,
                sends=result.sends,
                effects=result.effects,
                sent_to_review=result.sent_to_review,
                reviews_answered=result.reviews_answered,
                tool_errors=result.tool_errors,
                audit=audit,
            )
            result.check_failures = list(strategy.check(report))
    provider.close()
    result.seconds = round(time.perf_counter() - started, 3)
    return result


def _run_operation(
    cell: Cell,
    workers: _Workers,
    provider: Provider,
    result: CellResult,
    index: int,
    label: str,
) -> None:
    point = cell.crash_point
    base = Attempt(
        kind="start", index=index, operation=label, body=f"hello #{index}", thread_id=f"op-{index}"
    )
    faulted = cell.faulted(index)
    if faulted:
        result.faulted += 1
        result.faulted_operations.append(index)
    first = AttemptFaults(
        kill_at=point.first_kill if faulted else None,
        timeout_after_apply=faulted and point.first_timeout,
    )
    outcome = workers.run(_with(base, faults=first))
    if isinstance(outcome, Killed):
        # Whatever runs after the crash runs in the changed world.
        base = _with(base, policy_version=2 if point.bump_policy else 1)
        result.kills += 1
        if cell.provider == "withdrawn":
            # The provider's back office withdraws what landed while nobody knew:
            # its listing now hides it, only a single-item get still tells.
            for record in provider.effects(label):
                if not record.withdrawn:
                    provider.withdraw(record.effect_id)
        resume = _with(
            base,
            kind="resume",
            faults=AttemptFaults(lookup_timeout=point.lookup_timeout, rendezvous=point.resumers > 1),
        )
        if point.resumers > 1:
            runs = [(workers.current, resume)] + [
                (workers.spawn(), resume) for _ in range(point.resumers - 1)
            ]
            outcomes = drive(runs)
        else:
            outcomes = [workers.run(resume)]
        if any(isinstance(o, Killed) for o in outcomes):
            raise WorkerError(f"operation {index}: a resumed attempt was killed")
        reports = [o.report for o in outcomes if isinstance(o, Done)]
        # The twin of a duplicate delivery has done its job.
        for handle in workers.extra:
            handle.close()
        workers.extra.clear()
    else:
        reports = [outcome.report]
    _settle_reviews(cell, workers, provider, result, base, reports)


def _settle_reviews(
    cell: Cell,
    workers: _Workers,
    provider: Provider,
    result: CellResult,
    base: Attempt,
    reports: list[AttemptReport],
) -> None:
    """Answer the operation's interrupts as an operator who checked the provider."""
    if not any(r.interrupts for r in reports):
        # Each report describes the whole thread: count its error messages once.
        result.tool_errors += max(r.tool_errors for r in reports)
        return
    result.sent_to_review += 1
    answer = cell.strategy.answer_review
    # Two resumers may report the same interrupt: ask the thread what is pending.
    report = _finished(workers.run(_with(base, kind="inspect")), base)
    rounds = 0
    while report.interrupts and answer is not None and rounds < MAX_REVIEW_ROUNDS:
        rounds += 1
        case = ReviewCase(
            operation=base.operation,
            thread_id=base.thread_id,
            provider_mode=cell.provider,
            crash_point=cell.crash_point.name,
            interrupts=report.interrupts,
            effects=provider.effects(base.operation),
        )
        value = answer(case)
        result.reviews_answered += 1
        report = _finished(workers.run(_with(base, kind="answer", resume=value)), base)
    if report.interrupts:
        result.pending_reviews += 1
    result.tool_errors += report.tool_errors


def _finished(outcome: Done | Killed, attempt: Attempt) -> AttemptReport:
    if isinstance(outcome, Killed):
        raise WorkerError(f"{attempt.thread_id}: an attempt nobody armed was killed")
    return outcome.report


def _with(attempt: Attempt, **changes: Any) -> Attempt:
    return replace(attempt, **changes)


def crash_point(name: str) -> CrashPoint:
    """The crash point called ``name`` (a ``KeyError`` lists the known ones)."""
    try:
        return CRASH_POINTS[name]
    except KeyError:
        raise KeyError(f"unknown crash point {name!r}; known: {', '.join(CRASH_POINTS)}") from None
