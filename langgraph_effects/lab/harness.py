"""One cell of the lab: a strategy, a provider and a crash point, over N operations.

Every operation is its own thread. The first attempt of every K-th operation is
armed with the cell's fault; a killed worker is reaped (its exit must be our
SIGKILL) and replaced, and the thread is resumed once with
``graph.ainvoke(None, config)``, exactly like the seed's single retry (by two
workers at once in the ``duplicate`` column; by a plain resume racing
``recover()`` in ``two-runners``). A worker that stopped itself (``paused-owner``)
is continued once a second worker had its go at the thread. If the graph then
waits on an operator, the strategy's ``answer_review`` answers with the
provider's truth (the lab answers its own questions, ``ask_human``, with yes);
a thread left with work pending (a runner that lost its race) is resumed until
it finishes.

The edge-path columns add three moves: the user edits their first message once the
turn is done (``edit-branch``), the operator's first answer to a review is
oversized (``wedging-answer``), and the cell is counted only once every child
sender is done (``child-process``).

The counts come from the provider's own records, never from the worker.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

from .child import await_stragglers, resume_returned
from .driver import Driver, WorkerHandle, drive_workers
from .faults import CIRCUIT_COOLDOWN, CRASH_POINTS, PAUSE_SECONDS, AttemptFaults, CrashPoint
from .providers import Provider, ProviderMode
from .strategies import (
    EDITED,
    QUESTION_TYPE,
    CellFiles,
    CellReport,
    ReviewCase,
    Strategy,
    intended_effects,
)
from .worker import (
    Attempt,
    AttemptReport,
    Done,
    Killed,
    ProviderSettings,
    WorkerError,
    WorkerSpec,
)

#: Review rounds per operation before the lab gives up and leaves it pending.
MAX_REVIEW_ROUNDS = 3
#: Resumes of a thread left with work pending before the lab gives up on it.
MAX_FINISH_ROUNDS = 3
#: How long the paused owner's rival may take to reach the call (a fresh worker
#: builds its graph first), and then to decide about it, before the owner is
#: continued anyway (a rival that rightly waits for the live owner would
#: otherwise wait for ever).
RIVAL_START_SECONDS = 5.0
RIVAL_DECIDE_SECONDS = 1.0

#: A soak operation's first attempt: a named crash point, ``random`` (a SIGKILL
#: from the lab at that fraction of a typical attempt's duration) or ``none``.
SoakFault = tuple[str, float]


def _thread_id(index: int) -> str:
    return f"op-{index}"


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
    schedule: tuple[SoakFault, ...] | None = None
    """The soak: each operation's own fault (overrides the column and ``kill_every``)."""
    first_index: int = 1
    """The index of the cell's first operation (soak chunks number on)."""
    tag: str = ""
    """Makes the cell's name unique (soak chunks)."""

    @property
    def name(self) -> str:
        return f"{self.strategy.name}--{self.provider}--{self.crash_point.name}{self.tag}"

    def faulted(self, index: int) -> bool:
        if self.schedule is not None:
            return self._soak(index)[0] != "none"
        return self.crash_point.armed and index % self.kill_every == self.phase

    def _soak(self, index: int) -> SoakFault:
        assert self.schedule is not None
        return self.schedule[index - self.first_index]

    def first_faults(self, index: int, typical: float) -> AttemptFaults:
        """What the first attempt of operation ``index`` is armed with (``typical``:
        seconds a first attempt usually takes, for kills at a random moment)."""
        if not self.faulted(index):
            return AttemptFaults()
        if self.schedule is not None:
            kind, fraction = self._soak(index)
            if kind == "random":
                return AttemptFaults(kill_after=fraction * typical)
            if kind == "timeout":
                return AttemptFaults(timeout_after_apply=True)
            return AttemptFaults(kill_at=kind)
        point = self.crash_point
        kill_at = point.first_kill
        if point.first_kills:  # the kill points take turns over the faulted operations
            turn = sum(1 for i in range(self.first_index, index) if self.faulted(i))
            kill_at = point.first_kills[turn % len(point.first_kills)]
        return AttemptFaults(
            kill_at=kill_at,
            rendezvous=point.twins,
            timeout_after_apply=point.first_timeout,
            pause_at=point.pause_at,
            hold=point.hold,
            rate_limit=point.rate_limited,
            kill_on=point.kill_on,
            mcp_lost=point.mcp_lost,
        )


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
    operations: int = 0  # threads run
    first_operation: int = 1
    intended: int = 0  # effects meant (two per thread in some columns)
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
    refused: int = 0  # runs that failed because another runner had the thread (races)
    refused_foreign: list[str] = field(default_factory=list)  # refusals not from our errors
    refusals: list[str] = field(default_factory=list)  # what tolerated runs raised (a few, any run)
    stopped: list[int] = field(default_factory=list)  # refused with our error, missing excused (stop_ok)
    resumes: int = 0  # extra resumes to finish threads a refused runner left pending
    random_kills: int = 0  # soak: workers SIGKILLed by the lab at a random moment
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the cell's CPU: its workers' (as they reported) and the lab thread's
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
            problems.append(f"{self.missing} missing effects")
        if self.non_terminal is None:
            problems.append("no audit of non-terminal operations")
        elif self.non_terminal:
            problems.append(f"{self.non_terminal} operations left non-terminal")
        if self.pending_reviews:
            problems.append(f"{self.pending_reviews} reviews left unanswered")
        if self.refused_foreign:
            problems.append(
                f"{len(self.refused_foreign)} runners failed with an error that is not ours "
                f"(first: {self.refused_foreign[0]})"
            )
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
        self.started = [self.current]

    @property
    def cpu(self) -> float:
        """CPU seconds the cell's workers reported (a worker reports with every attempt)."""
        return sum(handle.cpu for handle in self.started)

    def spawn(self) -> WorkerHandle:
        handle = WorkerHandle(self.ctx, self.spec)
        self.extra.append(handle)
        self.started.append(handle)
        return handle

    def run(self, attempt: Attempt) -> Done | Killed:
        outcome = drive_workers([(self.current, attempt)])[0]
        self.replace_dead()
        return outcome

    def replace_dead(self) -> None:
        """A new current worker if the lab killed this one (it may have finished first)."""
        if self.current.killed_by_lab or self.current.crash_point is not None:
            self.current.close()
            self.spec = replace(self.spec, generation=self.spec.generation + 1)
            self.current = WorkerHandle(self.ctx, self.spec)
            self.started.append(self.current)

    def drop_extra(self) -> None:
        for handle in self.extra:
            handle.close()
        self.extra.clear()

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
    started, cpu_started = time.perf_counter(), time.thread_time()
    point, strategy = cell.crash_point, cell.strategy
    result = CellResult(strategy.name, cell.provider, point.name, strategy.ours)
    result.operations, result.first_operation = cell.ops, cell.first_index
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
        effect_saver=strategy.effect_saver,
        sync=strategy.sync,
    )
    workers = _Workers(ctx, spec)
    indices = range(cell.first_index, cell.first_index + cell.ops)
    intended: dict[str, int] = {}
    timing = _Timing()
    try:
        for index in indices:
            label = operation_label(index)
            intended.update(_intended(cell, provider, index, label))
            _run_operation(cell, workers, provider, result, index, label, timing)
            on_operation()
    except WorkerError as exc:
        result.error = str(exc)
    finally:
        workers.close()
    if point.child and await_stragglers(files.children) and result.error is None:
        result.error = "child senders were still running when the cell was counted"
    if result.stopped:
        # Refused loudly before anything wrong was sent: what was not sent is not lost.
        landed = provider.count_effects()
        for index in result.stopped:
            for label in intended_effects(point.scenario, operation_label(index)):
                intended[label] = min(intended[label], landed.get(label, 0))
    tally = provider.tally(intended)
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
            if result.stopped:
                # A stopped thread waits, open, for a fixed deployment: not a broken one.
                excused = sum(audit.open_by_thread.get(_thread_id(i), 0) for i in result.stopped)
                result.non_terminal -= excused
                result.audit["open_in_stopped_threads"] = excused
        if strategy.check is not None:
            counts = {name: getattr(result, name) for name in _REPORTED_COUNTS}
            report = CellReport(
                files=files, provider_mode=cell.provider, crash_point=point.name, audit=audit, **counts
            )
            result.check_failures = list(strategy.check(report))
    provider.close()
    result.seconds = round(time.perf_counter() - started, 3)
    result.cpu_seconds = round(workers.cpu + time.thread_time() - cpu_started, 3)
    return result


#: The counts a strategy's own check reads (`CellReport`), as the cell's result has them.
_REPORTED_COUNTS = (
    "intended",
    "faulted",
    "kills",
    "sends",
    "effects",
    "sent_to_review",
    "reviews_answered",
    "tool_errors",
)


class _Timing:
    """How long an unfaulted first attempt takes in this cell: the median of the last
    few (a worker's first attempt also waits for its graph to be built)."""

    def __init__(self) -> None:
        self.recent: list[float] = []

    @property
    def typical(self) -> float:
        return statistics.median(self.recent) if self.recent else 0.05

    def observe(self, seconds: float) -> None:
        self.recent = [*self.recent[-19:], seconds]


def _intended(cell: Cell, provider: Provider, index: int, label: str) -> dict[str, int]:
    """The effects operation ``index`` is meant to have (and, in ``circuit-open``, the
    provider starts refusing every send at its operation)."""
    point = cell.crash_point
    intended = intended_effects(point.scenario, label)
    if point.edit and cell.faulted(index):
        intended[label + EDITED] = 1  # the edited message asks for its own send
    if point.goes_down and index >= went_down(cell):
        intended[label] = 0  # the provider refuses everything from here on
        if index == went_down(cell):
            provider.rate_limit(10**6)
    return intended


def went_down(cell: Cell) -> int:
    """``goes_down``: the operation from which on the provider refuses every send (the
    one before the first faulted one, so that the circuit opens while two workers send)."""
    indices = range(cell.first_index, cell.first_index + cell.ops)
    first = next((i for i in indices if cell.faulted(i)), cell.first_index + cell.ops)
    return max(cell.first_index, first - 1)


def _run_operation(
    cell: Cell,
    workers: _Workers,
    provider: Provider,
    result: CellResult,
    index: int,
    label: str,
    timing: _Timing,
) -> None:
    point = cell.crash_point
    base = Attempt(
        kind="start",
        index=index,
        operation=label,
        body=f"hello #{index}",
        thread_id=_thread_id(index),
        tolerate=point.tolerate,
        run_id=f"run-{index}" if point.run_ids else None,
    )
    faulted = cell.faulted(index)
    if faulted:
        result.faulted += 1
        result.faulted_operations.append(index)
    if point.scenario == "two-turns":
        # The first turn runs untouched; the fault is in the second, the same request again.
        _settle(cell, workers, provider, result, base, [_finished(workers.run(base), base)])
        base = _with(base, turn=2)
    first = _with(base, faults=cell.first_faults(index, timing.typical))
    if point.twins and faulted:
        # Two workers, one thread each in the same run, released together at the call.
        twin = _with(first, thread_id=f"{base.thread_id}-twin")
        if point.goes_down and index > went_down(cell) + 1:
            time.sleep(CIRCUIT_COOLDOWN)  # the circuit is open: both meet it half-open
        outcomes = drive_workers([(workers.current, first), (workers.spawn(), twin)])
        workers.drop_extra()
        reports = [_finished(o, first) for o in outcomes]
        for attempt, report in zip((first, twin), reports, strict=True):
            _settle(cell, workers, provider, result, attempt, [report])
        return
    if first.faults.pause_at is not None:
        # Continued after a rival had the thread: it may rightly lose it to the rival.
        reports = _paused_owner(workers, result, _with(first, tolerate=True))
    else:
        began = time.perf_counter()
        outcome = workers.run(first)
        if not faulted:
            timing.observe(time.perf_counter() - began)
        if isinstance(outcome, Killed):
            reports = _resume_after_kill(cell, workers, provider, result, base, outcome)
        else:
            reports = [outcome.report]
            if point.edit and faulted:
                # The turn is done; the user edits their message: a branch from the start.
                reports.append(_finished(workers.run(_with(base, kind="edit")), base))
    _settle(cell, workers, provider, result, base, reports)


def _resume_after_kill(
    cell: Cell,
    workers: _Workers,
    provider: Provider,
    result: CellResult,
    base: Attempt,
    outcome: Killed,
) -> list[AttemptReport]:
    point = cell.crash_point
    # Whatever runs after the crash runs in the changed world.
    base = _with(base, policy_version=2 if point.bump_policy else 1)
    result.kills += 1
    if outcome.point == "random":
        result.random_kills += 1
    if cell.provider == "withdrawn":
        # The provider's back office withdraws what landed while nobody knew:
        # its listing now hides it, only a single-item get still tells.
        for record in provider.effects():
            if _of(record.operation, base.operation) and not record.withdrawn:
                provider.withdraw(record.effect_id)
    kinds = point.resume_kinds
    resume = _with(
        base,
        kind=kinds[(len(result.faulted_operations) - 1) % len(kinds)] if cell.strategy.ours else "resume",
        faults=AttemptFaults(
            lookup_timeout=point.lookup_timeout,
            rendezvous=point.resumers > 1,
            rendezvous_at_start=point.race,
        ),
        # Two runners on one thread: the one that loses it may fail (with our error).
        tolerate=base.tolerate or point.resumers > 1,
    )
    if point.resumers > 1:
        # The second runner: recover() where the strategy keeps a ledger (it is the
        # product's own resume path), else a plain resume like the first.
        rival = _with(resume, kind="recover") if point.race and cell.strategy.ours else resume
        runs = [(workers.current, resume)] + [(workers.spawn(), rival) for _ in range(point.resumers - 1)]
        outcomes = drive_workers(runs)
    else:
        outcomes = [workers.run(resume)]
    if point.child:
        resume_returned(cell_files(workers).children)
    if any(isinstance(o, Killed) for o in outcomes):
        raise WorkerError(f"operation {base.index}: a resumed attempt was killed")
    # The twin of a duplicate delivery has done its job.
    workers.drop_extra()
    return [o.report for o in outcomes if isinstance(o, Done)]


def cell_files(workers: _Workers) -> CellFiles:
    """The files of the cell the workers run."""
    return workers.spec.files


def _paused_owner(workers: _Workers, result: CellResult, first: Attempt) -> list[AttemptReport]:
    """The first worker stops itself at its pause point (SIGSTOP, same host, provably
    alive); once its lease is long over a second worker resumes the thread; then the
    first one is continued, and both run to their end."""
    owner = workers.current
    driver = Driver([(owner, first)])
    driver.until(lambda: driver.done(0) or (0 in driver.paused and owner.stopped()))
    if driver.done(0):
        # It never reached the pause point (nothing to send, say): nothing to race.
        return [_finished(driver.outcomes[0], first)]
    result.kills += 1  # counted with the kills: the worker was stopped, then continued
    rival = workers.spawn()  # builds its graph while the owner is stopped
    time.sleep(PAUSE_SECONDS)  # the pause itself: the owner's lease runs out meanwhile
    resume = _with(first, kind="resume", faults=AttemptFaults(announce=True), tolerate=True)
    rival_run = Driver([(rival, resume)])
    # The rival may rightly wait for the live owner: continue the owner either way,
    # once the rival stood at the call long enough to decide about it.
    rival_run.until(lambda: rival_run.done(0) or 0 in rival_run.reached, within=RIVAL_START_SECONDS)
    rival_run.until(lambda: rival_run.done(0), within=RIVAL_DECIDE_SECONDS)
    owner.resume_process()
    outcomes = [driver.finish()[0], rival_run.finish()[0]]
    workers.drop_extra()
    return [_finished(o, first) for o in outcomes]


#: ``wedging-answer``: what the operator pastes first, taking turns over the faulted
#: operations. Two are over the limits the review's schema publishes (a ``respond``
#: message over 64 KiB, a ``reject`` message over 4,096 characters): LangGraph refuses
#: them before storing anything. The third fits the schema's 65,536 characters but is
#: over the receipt's 65,536 bytes (two bytes a character): LangGraph stores it, and the
#: node must refuse it and ask again rather than wedge the thread.
WEDGING_RESPOND = "x" * (64 * 1024 + 1)
WEDGING_REJECT = "y" * 4097
WEDGING_PASTED = "\u00e9" * 40_000
WEDGE_KINDS = ("respond", "reject", "pasted")


def wedging_answer(reviews: list[tuple[str, Any]], kind: str) -> dict[str, Any]:
    """An oversized answer of ``kind`` (one of `WEDGE_KINDS`) in LangChain's HITL
    shape: one decision per ``action_requests`` entry of each pending review."""
    decision = {
        "respond": {"type": "respond", "message": WEDGING_RESPOND},
        "reject": {"type": "reject", "message": WEDGING_REJECT},
        "pasted": {"type": "respond", "message": WEDGING_PASTED},
    }[kind]
    return {
        interrupt_id: {"decisions": [decision] * len(value.get("action_requests", ()))}
        for interrupt_id, value in reviews
        if isinstance(value, Mapping)
    }


def _answer(
    cell: Cell, provider: Provider, base: Attempt, report: AttemptReport, *, wedge: str | None = None
) -> tuple[Any, bool]:
    """The value for ``Command(resume=...)``: the lab's own questions are answered yes,
    the reviews by the strategy (as an operator who checked the provider). Also
    whether there were reviews among them. ``wedge``: answer the reviews with an
    oversized message of that kind instead (`wedging_answer`)."""
    questions = [(i, v) for i, v in report.interrupts if _is_question(v)]
    reviews = [(i, v) for i, v in report.interrupts if not _is_question(v)]
    answers: dict[str, Any] = {interrupt_id: "yes" for interrupt_id, _ in questions}
    if reviews and wedge is not None:
        answers.update(wedging_answer(reviews, wedge))
    elif reviews and cell.strategy.answer_review is not None:
        case = ReviewCase(
            operation=base.operation,
            thread_id=base.thread_id,
            provider_mode=cell.provider,
            crash_point=cell.crash_point.name,
            interrupts=reviews,
            effects=[r for r in provider.effects() if _of(r.operation, base.operation)],
        )
        value = cell.strategy.answer_review(case)
        if isinstance(value, Mapping) and all(i in value for i, _ in reviews):
            answers.update(value)
        elif not questions:
            return value, True
    elif reviews:
        return None, True
    return answers, bool(reviews)


def _of(label: str, operation: str) -> bool:
    """Whether an effect's label belongs to the operation (its follow-up and siblings too)."""
    return label == operation or label.startswith(operation + "/")


def _is_question(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == QUESTION_TYPE


def _settle(
    cell: Cell,
    workers: _Workers,
    provider: Provider,
    result: CellResult,
    base: Attempt,
    reports: list[AttemptReport],
) -> None:
    """Run the operation's thread to its end: answer its interrupts (the lab's
    questions; reviews as an operator who checked the provider) and resume it while
    work is pending (a runner that lost its race leaves it so)."""
    if cell.crash_point.stop_ok and any(r.refused_ours for r in reports):
        result.stopped.append(base.index)
    for report in reports:
        _sample_refusal(result, report)
        if report.refused is not None:
            result.refused += 1
            if not report.refused_ours:
                result.refused_foreign.append(report.refused)
    if not any(r.interrupts for r in reports) and all(r.finished for r in reports):
        # Each report describes the whole thread: count its error messages once.
        result.tool_errors += max(r.tool_errors for r in reports)
        return
    # Two runners may report the same interrupt: ask the thread what is pending.
    report = _finished(workers.run(_with(base, kind="inspect")), base)
    reviewed, rounds, resumes = False, 0, 0
    while True:
        if report.interrupts:
            if rounds >= MAX_REVIEW_ROUNDS:
                break
            # wedging-answer: the first answer is oversized, its kinds taking turns.
            turn = len(result.faulted_operations) % len(WEDGE_KINDS)
            wedge = WEDGE_KINDS[turn] if cell.crash_point.wedge and not rounds else None
            value, has_reviews = _answer(cell, provider, base, report, wedge=wedge)
            reviewed = reviewed or has_reviews
            if value is None:
                break  # a review nobody can answer: left pending
            rounds += 1
            result.reviews_answered += int(has_reviews)
            report = _finished(workers.run(_with(base, kind="answer", resume=value)), base)
            _sample_refusal(result, report)
        elif not report.finished and resumes < MAX_FINISH_ROUNDS:
            resumes += 1
            result.resumes += 1
            report = _finished(workers.run(_with(base, kind="resume")), base)
            _sample_refusal(result, report)
        else:
            break
    result.sent_to_review += int(reviewed)
    if any(not _is_question(v) for _, v in report.interrupts):
        result.pending_reviews += 1
    result.tool_errors += report.tool_errors


#: Refusals a cell keeps as samples (for the JSON: why tolerated runs failed).
REFUSAL_SAMPLES = 3


def _sample_refusal(result: CellResult, report: AttemptReport) -> None:
    """Keep a few distinct refusals (their first line) as samples."""
    if report.refused is None or len(result.refusals) >= REFUSAL_SAMPLES:
        return
    sample = report.refused.strip().splitlines()[:3]
    text = " ".join(line.strip() for line in sample)[:400]
    if text not in result.refusals:
        result.refusals.append(text)


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
