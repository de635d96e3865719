"""What a crash test found: one `RunResult` per faulted run, and the `CrashReport`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..core._fields import pick
from .worker import ToolCall


@dataclass
class RunResult:
    """One faulted run: a fresh thread, faulted once, resumed until it finished."""

    point: str
    call: int | None
    """The control run's call (1-based) the fault was aimed at; ``None`` for random kills."""
    tool: str | None
    thread_id: str
    expected: int
    effects: int | None = None
    """The probe's count for the thread once the run ended."""
    reviews: int = 0
    """Review rounds answered from the probe."""
    processes: int = 0
    kills: int = 0
    restarts: int = 0
    """Attempts that ended (a kill, mostly a random one) before the thread's first
    checkpoint: the run had not started (nothing of it is durable, no tool can have
    run), so it was started again instead of resumed."""
    fault_reached: bool = False
    finished: bool = False
    errors: list[str] = field(default_factory=list)
    """What the graph raised along the way (a fault's timeout, a lost race)."""
    problem: str | None = None
    """Why the run could not be completed (it then decides nothing but exit code 5)."""
    kill_after: float | None = None
    seconds: float = 0.0

    @property
    def duplicates(self) -> int:
        """Effects beyond the control run's (a fact at the provider, finished or not)."""
        return max(0, (self.effects or 0) - self.expected) if self.effects is not None else 0

    @property
    def missing(self) -> int:
        """Effects the control run made that this thread lacks once it finished (a run
        that could not be completed has lost nothing yet: it is ``broken``)."""
        if self.effects is None or self.problem is not None:
            return 0
        return max(0, self.expected - self.effects)

    @property
    def label(self) -> str:
        """``point at call N (tool)``, or the random kill's moment."""
        if self.call is None:
            return f"{self.point} (kill after {self.kill_after or 0.0:.2f} s)"
        return f"{self.point} at call {self.call} ({self.tool})"

    def outcome(self) -> str:
        """The run's one classification, from which the table's cell, the verdict and
        the exit code are all derived: ``duplicated`` (the provider holds more effects
        than the control run made, whether or not the run finished), ``broken`` (it
        could not be completed, see `problem`), ``lost`` (it finished with fewer
        effects) or ``exact``."""
        if self.duplicates:
            return "duplicated"
        if self.problem is not None:
            return "broken"
        if self.missing:
            return "lost"
        return "exact"

    def to_json(self) -> dict[str, Any]:
        """The run as JSON-ready data, with its duplicates, missing and outcome."""
        row = asdict(self)
        row.update(duplicates=self.duplicates, missing=self.missing, outcome=self.outcome())
        return row


@dataclass
class CrashReport:
    """What `crashtest` found; ``duplicates`` and ``missing`` sum over the runs."""

    factory: str
    probe: str
    control_thread: str
    expected: int
    """Effects the probe counted for the control run's thread (no fault)."""
    calls: list[ToolCall]
    dispatcher_points: list[str]
    """Dispatcher fault points the control run passed (empty: the graph does not use the package)."""
    points: list[str]
    runs: list[RunResult]
    not_applicable: dict[str, str] = field(default_factory=dict)
    """Requested points that ran nothing, and why."""
    control_seconds: float = 0.0
    seconds: float = 0.0

    def _runs(self, outcome: str) -> list[RunResult]:
        return [r for r in self.runs if r.outcome() == outcome]

    @property
    def duplicates(self) -> int:
        """Duplicated effects, summed over the ``duplicated`` runs."""
        return sum(r.duplicates for r in self._runs("duplicated"))

    @property
    def missing(self) -> int:
        """Lost effects, summed over the ``lost`` runs."""
        return sum(r.missing for r in self._runs("lost"))

    @property
    def broken(self) -> list[RunResult]:
        """The runs that could not be completed (see `RunResult.problem`)."""
        return self._runs("broken")

    @property
    def ok(self) -> bool:
        """Every faulted run ended with exactly the control run's effects."""
        return all(r.outcome() == "exact" for r in self.runs)

    @property
    def exit_code(self) -> int:
        """0 every run exact; 1 a run duplicated or lost effects; 5 a run could not be
        completed (and none duplicated or lost). From `RunResult.outcome`."""
        if self._runs("duplicated") or self._runs("lost"):
            return 1
        return 5 if self.broken else 0

    def matrix(self) -> dict[str, dict[str, RunResult]]:
        """``{point: {column: run}}``; columns are ``"1"``, ``"2"`` … per call, or the random run's number."""
        out: dict[str, dict[str, RunResult]] = {}
        for run in self.runs:
            column = str(run.call) if run.call is not None else str(len(out.get(run.point, {})) + 1)
            out.setdefault(run.point, {})[column] = run
        return out

    def verdict(self) -> str:
        """One line: does the graph keep exactly its effects through every fault?
        Derived from each run's `RunResult.outcome`, as the exit code is."""
        n = len(self.runs)
        if not n:
            return "crashtest: no faulted run was made (the control run made no tool call?)"
        dup, lost, broken = self._runs("duplicated"), self._runs("lost"), self.broken
        unfinished = ""
        if broken:
            unfinished = f"{len(broken)} of {n} runs could not be completed ({broken[0].problem})"
        if dup or lost:
            parts = []
            if dup:
                parts.append(f"{len(dup)} of {n} faulted runs duplicated effects ({self.duplicates} extra)")
            if lost:
                parts.append(f"{len(lost)} of {n} lost effects ({self.missing} missing)")
            if unfinished:
                parts.append(unfinished)
            return f"crashtest: NOT crash-safe: {'; '.join(parts)}."
        if broken:
            return f"crashtest: {unfinished}; the others kept exactly {self.expected} effect(s)."
        return (
            f"crashtest: crash-safe on every fault tried: all {n} faulted runs ended with exactly "
            f"the control run's {self.expected} effect(s)."
        )

    def to_json(self) -> dict[str, Any]:
        """What ``--json`` writes: the summary, the control run's calls and every run."""
        return {
            **pick(self, "factory", "probe", "control_thread", "expected"),
            "calls": [asdict(c) for c in self.calls],
            **pick(self, "dispatcher_points", "points", "not_applicable", "duplicates", "missing"),
            "broken": len(self.broken),
            **pick(self, "ok", "exit_code"),
            "verdict": self.verdict(),
            "control_seconds": round(self.control_seconds, 3),
            "seconds": round(self.seconds, 3),
            "runs": [r.to_json() for r in self.runs],
        }
