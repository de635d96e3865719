"""Which cells run at once: the longest first, and as many as keep the cores busy.

A cell computes (its operations, in the lab's thread and its worker) and waits on a
clock: a paused owner stays stopped past its lease, held sends wait for a later
attempt, a child sender waits for the resumer, the lagging provider's "not found"
is believed only after its settle time. Those waits are the columns' own margins
and stay as they are; the scheduler lets them overlap with other cells' work
instead of holding a slot. Each cell is given a *weight*, the share of its time it
is expected to compute; cells start, the longest first, while the running weights
add up to at most ``jobs`` (one cell alone always starts). A cell that mostly waits
therefore takes a fraction of a slot, and the long waiting cells no longer make the
tail of the run.

The estimates only order and pack the cells: every cell still runs, with the same
operations and faults.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .child import CHILD_MAX_WAIT
from .faults import CIRCUIT_COOLDOWN, HOLD_SECONDS, PAUSE_SECONDS
from .harness import RIVAL_DECIDE_SECONDS, Cell, CellResult
from .ours import SETTLE_MARGIN

#: Computing seconds per effect meant (a turn through the graph, its checkpoints and
#: ledger rows, the provider) and per faulted operation (a replacement worker, the
#: resume, a review): relative figures measured on the project's 2-core machine.
OP_SECONDS = 0.015
FAULT_SECONDS = 0.06
#: At most this many cells at once per unit of ``jobs``, however light their weights
#: (each holds one or more worker processes). Cells that mostly wait (weight under
#: `WAITING`) take at most all but ``jobs`` of those places: the busy cells
#: always find room.
MAX_CELLS_PER_JOB = 5
WAITING = 0.5


@dataclass(frozen=True)
class Estimate:
    """What a cell is expected to cost: computing and waiting, in seconds."""

    busy: float
    idle: float

    @property
    def seconds(self) -> float:
        return self.busy + self.idle

    @property
    def weight(self) -> float:
        """The share of its time the cell computes (0 < weight <= 1)."""
        return self.busy / self.seconds if self.seconds > 0 else 1.0


def estimate(cell: Cell) -> Estimate:
    """The cell's expected cost, from its column's waits and its operation count."""
    point, ours = cell.crash_point, cell.strategy.ours
    faulted = sum(1 for i in range(cell.first_index, cell.first_index + cell.ops) if cell.faulted(i))
    wait = 0.0  # seconds per faulted operation spent waiting on a clock
    if point.pause_at is not None:
        wait += PAUSE_SECONDS + (RIVAL_DECIDE_SECONDS if ours else 0.0)
    if point.hold and ours:
        wait += HOLD_SECONDS  # ours never sends again, so the held sends time out
    if point.child and ours:
        wait += CHILD_MAX_WAIT  # the resumer rightly waits for the live child
    if point.goes_down:
        wait += CIRCUIT_COOLDOWN  # each later race waits out the circuit's cooldown
    if ours and cell.provider == "lagging" and point.ambiguous:
        wait += cell.settings.lag + SETTLE_MARGIN
    busy = cell.ops * point.per_operation * OP_SECONDS + faulted * FAULT_SECONDS
    return Estimate(busy=busy, idle=faulted * wait)


def order(cells: Sequence[Cell]) -> list[int]:
    """Cell positions, the longest expected first (ties: table order)."""
    return sorted(range(len(cells)), key=lambda i: -estimate(cells[i]).seconds)


class Admission:
    """Which pending cells may start now (see the module docstring)."""

    def __init__(self, cells: Sequence[Cell], jobs: int) -> None:
        self.jobs = jobs
        self.weights = [estimate(cell).weight for cell in cells]
        self.pending = order(cells)
        self.running: set[int] = set()

    @property
    def load(self) -> float:
        return sum(self.weights[i] for i in self.running)

    def ready(self) -> list[int]:
        """Pending cells to start now, in order; they count as running from here."""
        started = []
        for i in list(self.pending):
            if len(self.running) >= self.jobs * MAX_CELLS_PER_JOB:
                break
            if self.running and self.load + self.weights[i] > self.jobs + 1e-9:
                continue
            waiting = sum(1 for j in self.running if self.weights[j] < WAITING)
            if self.weights[i] < WAITING and waiting >= self.jobs * (MAX_CELLS_PER_JOB - 1):
                continue
            self.pending.remove(i)
            self.running.add(i)
            started.append(i)
        return started

    def finished(self, i: int) -> None:
        self.running.discard(i)


# -- what the run cost ---------------------------------------------------------------


def _proc_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and of the children it has reaped (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return 0.0
    fields = stat[stat.rfind(")") + 2 :].split()
    # utime, stime, cutime, cstime: fields 14-17 of proc(5), in clock ticks.
    ticks = sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(forkserver_pid: int | None) -> tuple[float, float]:
    """CPU seconds used so far by the lab's own process and by its workers (the fork
    server and every worker it has reaped; a worker still running is not counted)."""
    own = os.times()
    workers = _proc_cpu(forkserver_pid) if forkserver_pid is not None else 0.0
    return own.user + own.system, workers


def timings(results: Sequence[CellResult], elapsed: float, cpu: tuple[float, float]) -> list[str]:
    """``--timings``: cell-seconds per column and per row, and the run's CPU seconds."""
    lines = []
    for title, key in (("column", _column), ("row", _row)):
        groups: dict[str, list[CellResult]] = {}
        for result in results:
            groups.setdefault(key(result), []).append(result)
        ranked = sorted(groups.items(), key=lambda item: -sum(r.seconds for r in item[1]))
        lines.append(
            f"per {title} (cells: seconds summed, longest; cpu seconds): "
            + " · ".join(
                f"{name} ({len(rs)}): {sum(r.seconds for r in rs):.1f}, {max(r.seconds for r in rs):.1f}; "
                f"cpu {sum(r.cpu_seconds for r in rs):.1f}"
                for name, rs in ranked
            )
        )
    own, workers = cpu
    total = own + workers
    lines.append(
        f"cpu: {total:.1f} s ({own:.1f} s the lab's process, {workers:.1f} s its workers) in "
        f"{elapsed:.1f} s wall: {total / elapsed if elapsed else 0.0:.2f} cores busy on average; "
        f"{sum(r.seconds for r in results):.1f} cell-seconds"
    )
    return lines


def _column(result: CellResult) -> str:
    return result.crash_point


def _row(result: CellResult) -> str:
    return f"{result.strategy}/{result.provider}"
