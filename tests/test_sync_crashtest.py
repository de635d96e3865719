"""``crashtest`` on a sync graph (``sync=True``): every attempt is ``graph.invoke`` on
``EffectSqliteSaver``, as a sync app runs it; workers are really SIGKILLed and
every count is checked against the notification service's own records."""

from __future__ import annotations

from typing import Any

import pytest

from tests import test_crashtest as crashtest_tests

pytestmark = [pytest.mark.crash, pytest.mark.slow]
service = crashtest_tests.service  # the example notification service, on loopback
AGENT = crashtest_tests.AGENT


async def test_a_sync_graph_under_crashtest_holds_on_every_fault_tried(service: Any) -> None:
    from langgraph_effects.testing import crashtest
    from tests.helpers import crashtest_agent

    report = await crashtest(
        crashtest_agent.sync_effect_graph, crashtest_agent.probe,
        points=["after-tool", "before-outcome", "two-runners"], sync=True,
    )
    held = crashtest_tests.per_thread(service)
    assert report.expected == held[report.control_thread] == 1
    assert [(r.point, r.effects, held[r.thread_id], r.finished) for r in report.runs] == [
        ("after-tool", 1, 1, True),  # killed after the send: the resume re-sends under its key
        ("before-outcome", 1, 1, True),
        ("two-runners", 1, 1, True),  # two sync runners resumed it at once: one proceeded
    ]
    assert (report.duplicates, report.missing, report.exit_code) == (0, 0, 0)
