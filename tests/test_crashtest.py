"""``langgraph-effects crashtest`` and ``testing.crashtest`` on user-style graphs.

The graphs (``tests/helpers/crashtest_agent.py``) call the example notification
service (``examples/provider``: Starlette + uvicorn on loopback, its own SQLite
records). Every count the crash test reports is checked against the service's
own records. Workers are really SIGKILLed. Few points and one call per graph, to
keep CI time down.

Needs the ``examples`` extra; without it these tests skip, except under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import require_extra
from tests.ledger import conftest as ledger_fixtures

pytestmark = pytest.mark.slow  # the crashtest runner as a process, killing workers

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
AGENT = "tests.helpers.crashtest_agent"


for _module in ("starlette", "uvicorn", "httpx"):
    require_extra(_module, "examples")

# A fresh schema per test, dropped afterwards; skips (or fails under CI=true) without a server.
pg_schema = ledger_fixtures.pg_schema


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from provider import run_in_background

    with run_in_background(db=tmp_path / "provider.sqlite") as running:
        monkeypatch.setenv("PROVIDER_URL", running.url)
        yield running


def per_thread(service: Any) -> Counter[str]:
    """The service's own records: notifications per reference (= thread id)."""
    return Counter(n["reference"] for n in service.notifications())


def crashtest_cli(
    *args: str, tmp_path: Path, capfd: pytest.CaptureFixture[str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Run ``langgraph-effects crashtest ARGS --json ...``: in this process when given
    ``capfd`` (cheaper: the fork server and imports are shared), else as a user would."""
    out = tmp_path / "report.json"
    if capfd is not None:
        from langgraph_effects.cli import main

        capfd.readouterr()
        code = main(["crashtest", *args, "--json", str(out)])
        captured = capfd.readouterr()
        done = subprocess.CompletedProcess(args, code, captured.out, captured.err)
        return done, (json.loads(out.read_text()) if out.exists() else None)
    proc = subprocess.run(
        [sys.executable, "-m", "langgraph_effects.cli", "crashtest", *args, "--json", str(out)],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(out.read_text()) if out.exists() else None
    return proc, report


def assert_counts_match_the_service(report: dict[str, Any], service: Any) -> None:
    held = per_thread(service)
    assert held[report["control_thread"]] == report["expected"] == 1
    for run in report["runs"]:
        assert run["effects"] == held[run["thread_id"]], run
    # Nothing else reached the service: every notification belongs to a thread the report names.
    named = {report["control_thread"], *(run["thread_id"] for run in report["runs"])}
    assert set(held) <= named


@pytest.mark.crash
def test_a_plain_toolnode_graph_duplicates_and_the_counts_are_the_services(
    service: Any, tmp_path: Path
) -> None:
    proc, report = crashtest_cli(
        f"{AGENT}:plain_graph",
        "--probe",
        f"{AGENT}:probe",
        "--points",
        "after-tool,timeout",
        tmp_path=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert report is not None
    assert_counts_match_the_service(report, service)
    runs = {run["point"]: run for run in report["runs"]}
    assert set(runs) == {"after-tool", "timeout"}
    # Killed after the tool returned: the resume runs the ToolNode again, a second send.
    assert runs["after-tool"]["kills"] == 1 and runs["after-tool"]["effects"] == 2
    # A timeout for a call that landed: the graph raised, the resume sent it again.
    assert runs["timeout"]["kills"] == 0 and runs["timeout"]["effects"] == 2
    assert runs["timeout"]["errors"] and runs["timeout"]["errors"][0].startswith("TimeoutError")
    assert report["duplicates"] == 2 and report["missing"] == 0
    assert "NOT crash-safe" in proc.stdout and "2 of 2 faulted runs duplicated" in proc.stdout
    assert report["not_applicable"].keys() == set()  # only callback points were asked for
    # A progress line per finished run, although stderr is a pipe here.
    progress = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    assert [line.split(":")[0] for line in progress] == [
        "[1/2] after-tool at call 1 (send_notification)",
        "[2/2] timeout at call 1 (send_notification)",
    ]


@pytest.mark.crash
def test_the_same_graph_with_effect_tool_node_passes(
    service: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc, report = crashtest_cli(
        f"{AGENT}:effect_graph",
        "--probe",
        f"{AGENT}:probe",
        "--points",
        "after-tool,timeout,before-outcome,two-runners",
        "--random",
        "1",
        "--seed",
        "3",
        tmp_path=tmp_path,
        capfd=capfd,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report is not None
    assert_counts_match_the_service(report, service)
    points = [run["point"] for run in report["runs"]]
    assert points == ["after-tool", "timeout", "before-outcome", "two-runners", "random"]
    assert all(run["effects"] == 1 and run["finished"] for run in report["runs"])
    assert [run["kills"] for run in report["runs"][:4]] == [1, 0, 1, 1]
    assert 0 <= report["runs"][4]["kill_after"] <= report["control_seconds"]
    assert report["runs"][3]["processes"] >= 3  # the killed one, then two at once
    assert report["dispatcher_points"] == ["after-intent", "before-outcome"]
    assert "crash-safe on every fault tried" in proc.stdout


@pytest.mark.crash
def test_create_agent_with_effect_middleware_passes(
    service: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc, report = crashtest_cli(
        f"{AGENT}:agent_graph",
        "--probe",
        f"{AGENT}:probe",
        "--points",
        "after-tool,after-intent",
        "--input",
        json.dumps({"messages": [{"role": "user", "content": "Tell Ada the invoice is paid."}]}),
        tmp_path=tmp_path,
        capfd=capfd,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report is not None
    assert_counts_match_the_service(report, service)
    assert [(run["point"], run["effects"], run["kills"]) for run in report["runs"]] == [
        ("after-tool", 1, 1),
        ("after-intent", 1, 1),
    ]


def test_a_probe_that_raises_is_exit_5_and_says_so(
    service: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc, report = crashtest_cli(
        f"{AGENT}:effect_graph",
        "--probe",
        f"{AGENT}:broken_probe",
        "--points",
        "after-tool",
        tmp_path=tmp_path,
        capfd=capfd,
    )
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert report is None
    message = " ".join(proc.stderr.split())
    assert "a run could not be made" in message
    assert f"the probe {AGENT}:broken_probe raised ConnectionError" in message
    assert "refused the connection" in message


def test_a_factory_that_is_not_a_graph_is_exit_2_and_says_what_it_got(
    service: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc, report = crashtest_cli(
        f"{AGENT}:not_a_graph", "--probe", f"{AGENT}:probe", tmp_path=tmp_path, capfd=capfd
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert report is None
    message = " ".join(proc.stderr.split())
    assert "returned langgraph.graph.state.StateGraph" in message
    assert "not a compiled LangGraph graph" in message
    assert "builder.compile(checkpointer=checkpointer)" in message
    assert per_thread(service) == Counter()  # nothing ran


def test_a_factory_that_takes_no_checkpointer_is_exit_2_and_says_how_to_write_it(
    service: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc, report = crashtest_cli(
        f"{AGENT}:graph_without_checkpointer", "--probe", f"{AGENT}:probe", tmp_path=tmp_path, capfd=capfd
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr  # usage, as the README's exit codes say
    assert report is None
    message = " ".join(proc.stderr.split())
    factory = f"{AGENT}:graph_without_checkpointer"
    assert f"the factory {factory}() cannot be called with the checkpointer" in message
    assert "make_graph(checkpointer) or make_graph(*, checkpointer)" in message
    assert per_thread(service) == Counter()  # nothing ran


def test_a_name_the_module_lacks_says_which_file_was_imported_and_what_it_defines(
    service: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc, _ = crashtest_cli(
        f"{AGENT}:plain_graph", "--probe", f"{AGENT}:count_sent", tmp_path=tmp_path, capfd=capfd
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = " ".join(proc.stderr.split())
    helper = ROOT / "tests" / "helpers" / "crashtest_agent.py"
    assert f"was imported from {helper}, which has no attribute 'count_sent'" in message
    defined = message.split("it defines ", 1)[1].split(". Check", 1)[0].split(", ")
    assert {"agent_graph", "blind_graph", "broken_probe", "probe"} <= set(defined), message
    assert "Run from the directory" not in message  # the module was found: that advice would mislead
    assert per_thread(service) == Counter()


def test_a_module_not_on_the_path_says_where_it_was_looked_for(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc, _ = crashtest_cli(
        "support_agent:make_graph", "--probe", "support_agent:probe", tmp_path=tmp_path, capfd=capfd
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = " ".join(proc.stderr.split())
    assert "no module 'support_agent' on the import path" in message
    advice = "Run from the directory that holds support_agent.py (for the README's examples: cd examples)"
    assert advice in message


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--points", "after-tool,sideways"], "unknown fault point(s) sideways"),
        (["--input", "{not json"], "--input is not valid JSON"),
        (["--config", '{"configurable": {"thread_id": "x"}}'], "leave out thread_id"),
    ],
)
def test_bad_options_are_exit_2(
    args: list[str], says: str, service: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    proc, _ = crashtest_cli(
        f"{AGENT}:plain_graph", "--probe", f"{AGENT}:probe", *args, tmp_path=tmp_path, capfd=capfd
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert says in " ".join(proc.stderr.split())


@pytest.mark.crash
async def test_testing_crashtest_from_a_users_test_suite(service: Any) -> None:
    from langgraph_effects.testing import crashtest
    from tests.helpers import crashtest_agent

    report = await crashtest(
        crashtest_agent.plain_graph, crashtest_agent.probe, points=["before-tool", "after-tool"]
    )
    held = per_thread(service)
    assert report.expected == held[report.control_thread] == 1
    assert [(r.point, r.effects, held[r.thread_id]) for r in report.runs] == [
        ("before-tool", 1, 1),  # killed before the send: the resume sends it once
        ("after-tool", 2, 2),  # killed after: sent twice
    ]
    assert (report.duplicates, report.missing, report.exit_code) == (1, 0, 1)
    assert report.matrix()["after-tool"]["1"].outcome() == "duplicated"


@pytest.mark.crash
@pytest.mark.postgres
async def test_runs_on_effect_postgres_saver_with_db(service: Any, pg_schema: str) -> None:
    from urllib.parse import quote

    import psycopg

    from langgraph_effects.testing import crashtest
    from tests.helpers import crashtest_agent

    dsn = ledger_fixtures.require_postgres()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
    in_schema = f"{dsn}?options={quote(f'-c search_path={pg_schema}')}"
    report = await crashtest(
        crashtest_agent.effect_graph, crashtest_agent.probe, points=["before-outcome"], db=in_schema
    )
    held = per_thread(service)
    [run] = report.runs
    assert (run.point, run.kills, run.effects, held[run.thread_id]) == ("before-outcome", 1, 1, 1)
    assert report.exit_code == 0
    with psycopg.connect(dsn) as conn:
        threads = {
            row[0] for row in conn.execute(f'SELECT DISTINCT thread_id FROM "{pg_schema}".checkpoints')
        }
    assert {report.control_thread, run.thread_id} <= threads  # the runs were checkpointed there


@pytest.mark.crash
async def test_a_blind_call_goes_to_review_and_is_answered_from_the_probe(service: Any) -> None:
    from langgraph_effects.testing import crashtest

    report = await crashtest(f"{AGENT}:blind_graph", f"{AGENT}:probe", points=["before-tool", "after-tool"])
    held = per_thread(service)
    # Killed before the send: the probe shows nothing, "not landed", sent once on resume.
    # Killed after: the probe shows it, "landed", never sent again.
    assert [(r.point, r.reviews, r.effects, held[r.thread_id]) for r in report.runs] == [
        ("before-tool", 1, 1, 1),
        ("after-tool", 1, 1, 1),
    ]
    assert report.exit_code == 0


def test_the_console_reaches_crashtest(capsys: pytest.CaptureFixture[str]) -> None:
    from langgraph_effects.cli import main

    assert main(["crashtest", "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: langgraph-effects crashtest" in out and "MODULE:FACTORY" in out
    for point in ("before-tool", "after-tool", "timeout", "two-runners", "random"):
        assert f"  {point} " in out
    assert main(["crashtest"]) == 2  # the factory and --probe are required
    assert main(["--help"]) == 0
    assert "crashtest" in capsys.readouterr().out
