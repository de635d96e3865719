"""Test tiers, and a guard that keeps the fast tier fast.

Two tiers (docs/contributing.md):

* ``pytest -m "not slow"``: the fast tier, what you run while editing. Pure core,
  the ledger contract, the protocol, node/middleware/functional in-process tests.
* ``pytest -n 4``: everything (the README's and CI's command), on four xdist workers.

A test is ``slow`` (``pytestmark = pytest.mark.slow`` in its file, or
``@pytest.mark.slow`` on it) when it starts processes or servers: worker processes
it kills (``crash``), the CLI or a script as a subprocess, ``langgraph dev``, the
example servers, Postgres multi-worker runs; or runs the notebooks, the benchmark
smoke runs, the crash lab or a long property-test run (hypothesis, many examples of a
whole graph). A new test is fast unless it is marked.

The guard: a test not marked ``slow`` that burns more than ``FAST_CPU_LIMIT``
seconds of CPU (this process, the child processes it waited for, and the fork server
with the workers it forked) in setup and call fails with a message saying to mark it
or make it smaller. CPU time, not wall
time, so a loaded machine does not fail it. Wall time over ``FAST_WALL_LIMIT`` only
warns (listed at the end of the run): a wall clock is noise on a shared machine.
``LGE_SLOW_GUARD=0`` turns both off.

Grouping under xdist: ``pytest.mark.xdist_group("name")`` keeps a module's tests on one
worker (``--dist loadgroup``, pyproject's addopts), so a module-scoped lab run or server
is made once. xdist carries the group in the test's node id, which pytest 9.2 no longer
lets it change (pytest-dev/pytest-xdist#1386): ``pytest_collection_modifyitems`` below
does it where xdist's change did not take, and stops the run if neither did. Groups are
also started first (``pytest_xdist_make_scheduler``): they hold the longest work (the lab
runs, the crash-lab notebook, the benchmark runs), so a long one never starts last and
runs alone while the other workers idle. A single long test gets a group of its own.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

FAST_CPU_LIMIT = 5.0
FAST_WALL_LIMIT = 5.0

_GUARD_ON = os.environ.get("LGE_SLOW_GUARD", "1") != "0"


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupsFirst(LoadGroupScheduling):
        """xdist's loadgroup, with the groups (scopes named by a group, not a node id) first."""

        _ordered = False

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:
                self._ordered = True
                groups = [scope for scope in self.workqueue if "::" not in scope]
                for scope in reversed(groups):  # most tests first, as xdist sorted them
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return GroupsFirst(config, log)


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system + _forkserver_cpu()


def _forkserver_cpu() -> float:
    """CPU of multiprocessing's fork server and the workers it reaped (``tests/helpers/forked.py``,
    the lab): this process never waits for those, so ``os.times`` does not count them."""
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if not isinstance(pid, int):
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(")") + 2 :].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime..cstime


@dataclass
class _Spent:
    cpu: float = 0.0
    wall: float = 0.0


_SPENT = pytest.StashKey[_Spent]()


def _xdist_group(item: pytest.Item) -> str | None:
    """The group name xdist gives ``item`` (its ``xdist_group`` marks, joined as xdist does)."""
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    return "_".join(sorted(names)) if names else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: Sequence[pytest.Item]) -> None:
    # On an xdist worker under --dist loadgroup, after xdist's own hook has run.
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        group = _xdist_group(item)
        if group is None or item.nodeid.endswith(f"@{group}"):
            continue
        grouped = f"{item.nodeid}@{group}"
        if hasattr(item, "_id"):  # pytest >= 9.2: the node id is a structured NodeId
            from _pytest.nodeid import NodeId

            # The group goes after the parameters, as xdist's scheduler reads it: in the
            # last name, so that the id prints the same however it is rebuilt.
            last = item._id.names[-1] + ("" if item._id.params is None else f"[{item._id.params}]")
            item._id = NodeId(path=item._id.path, names=(*item._id.names[:-1], f"{last}@{group}"))
        if item.nodeid != grouped:
            raise pytest.UsageError(
                f"xdist_group has no effect with this pytest and pytest-xdist ({item.nodeid} "
                "would not be grouped): module-scoped lab runs and servers would be made once "
                "per worker. Update tests/conftest.py's pytest_collection_modifyitems."
            )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    before = _cpu_seconds()
    yield
    item.stash.setdefault(_SPENT, _Spent()).cpu += _cpu_seconds() - before


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    before = _cpu_seconds()
    yield
    item.stash.setdefault(_SPENT, _Spent()).cpu += _cpu_seconds() - before


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not _GUARD_ON or item.get_closest_marker("slow") is not None or report.when == "teardown":
        return
    spent = item.stash.setdefault(_SPENT, _Spent())
    spent.wall += report.duration
    if report.when != "call":
        return
    if spent.wall > FAST_WALL_LIMIT:
        report.user_properties.append(("fast_tier_wall", spent.wall))
    if report.passed and spent.cpu > FAST_CPU_LIMIT:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} is in the fast tier but used {spent.cpu:.1f} s of CPU in setup and call "
            f"(limit {FAST_CPU_LIMIT:.0f} s, child processes included). Mark it "
            "@pytest.mark.slow if it starts processes or servers, runs notebooks, benchmarks "
            "or the lab (tests/conftest.py says what slow means); otherwise make it smaller."
        )


_SLOW_WALL: list[tuple[str, float]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Runs where the reports arrive: in the xdist controller too.
    for key, value in report.user_properties:
        if key == "fast_tier_wall" and isinstance(value, float):
            _SLOW_WALL.append((report.nodeid, value))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _SLOW_WALL:
        return
    terminalreporter.section("fast-tier tests over the wall-time limit", sep="!", yellow=True)
    terminalreporter.line(
        f"Not marked slow, yet over {FAST_WALL_LIMIT:.0f} s of wall time in setup and call (a loaded "
        "machine inflates these; if one is slow on a quiet machine too, mark it "
        "@pytest.mark.slow or make it smaller):"
    )
    for nodeid, wall in sorted(_SLOW_WALL, key=lambda pair: -pair[1]):
        terminalreporter.line(f"  {wall:6.1f} s  {nodeid}")
