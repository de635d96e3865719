"""The walkthroughs of the README and the documentation run exactly as printed.

* The quickstart is ``examples/quickstart.py`` verbatim; the script runs on a fresh
  install with no API key, SIGKILLs its own worker mid-call, resumes, and the billing
  provider's own records hold one invoice.
* Every command of "When something crashed" (``docs/recovery.md``) runs, in order, as subprocesses against a
  real SQLite file, with ``examples/support_agent.py`` as the agent; the exit codes and
  first lines are the page's, and so are the ids it prints up to renaming (operation
  ids differ per run: each page id stands for the run's id that appears in the same
  place, one to one); the providers hold one effect each.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.testing import Provider

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
QUICKSTART = ROOT / "examples" / "quickstart.py"
SUPPORT_AGENT = ROOT / "examples" / "support_agent.py"
WIDTH = "100"  # the terminal width the page's console output was printed at

pytestmark = [pytest.mark.crash, pytest.mark.slow]


def page_body(name: str) -> str:
    """A documentation page up to its first ``## `` subsection."""
    return (DOCS / name).read_text().split("\n## ", 1)[0]


@pytest.mark.parametrize("shown_in", [README, DOCS / "getting-started.md"], ids=lambda p: p.name)
def test_the_shown_quickstart_is_the_script(shown_in: Path) -> None:
    text = shown_in.read_text()
    block = text.split("<!-- quickstart:start -->", 1)[1].split("<!-- quickstart:end -->", 1)[0]
    shown = block.strip().removeprefix("```python").removesuffix("```").strip()
    assert shown == QUICKSTART.read_text().strip(), (
        f"the quickstart in {shown_in.name} differs from examples/quickstart.py: paste the file "
        "between the quickstart markers"
    )


def test_quickstart_runs_crashes_resumes_and_counts_one_invoice(tmp_path: Path) -> None:
    env = {**os.environ, "QUICKSTART_DIR": str(tmp_path)}
    env.pop("OPENAI_API_KEY", None)  # no key needed
    run = subprocess.run(
        [sys.executable, str(QUICKSTART)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0] == "worker killed by signal 9 after the provider charged the invoice"
    assert lines[-1] == "billing provider: 1 invoice(s), 2 request(s)"
    # Counted again from the provider's own file, not from the script's words.
    billing = Provider(tmp_path / "billing.sqlite", "dedup")
    [invoice] = billing.effects()
    assert invoice.payload == {"customer": "acme", "amount": 100}
    assert billing.count_requests("apply") == 2  # the resume re-sent under the same key: replayed
    assert lines[1] == f"the model read: invoice {invoice.effect_id} sent"


def commands_of(section: str) -> list[tuple[str, str]]:
    """Each ``$ command`` of the section's code blocks, with the output printed under it."""
    found: list[tuple[str, str]] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", section, flags=re.S):
        for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, _, output = chunk.partition("\n")
            found.append((command.strip(), output))
    return found


def first_line(text: str) -> str:
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return " ".join(line.strip(" │╭╮╰╯─").split())


IDS = re.compile(r"\b(?:op|lge)_[0-9a-f]{32}\b")
# The console's first stderr line says where it connects, naming the run's absolute
# directory; the page leaves it out (its prose describes it).
NOTICE = re.compile(r"^langgraph-effects: (?:opening|reading) .*\n?", flags=re.M)


def crash_walkthrough() -> str:
    """The steps of "When something crashed", without its reference subsections (their
    commands need a Postgres database named in the text)."""
    return page_body("recovery.md")


def ids_in_order(text: str) -> list[str]:
    """The operation ids and provider keys of ``text``, each once, by first appearance."""
    return list(dict.fromkeys(IDS.findall(text)))


@dataclass
class Ran:
    """One documented command as run: the command with this run's ids, what it printed."""

    command: str
    printed: str  # under the command on the page
    output: str  # stdout + stderr of the run
    returncode: int


def run_section(section: str, cwd: Path) -> tuple[list[Ran], dict[str, str]]:
    """Run every ``$ command`` of ``section`` in ``cwd`` (holding ``support_agent.py``).

    Ids differ per run, so each id the page shows is mapped onto the id the run prints
    in its place: per command, the page's new ids and the run's new ids, both by first
    appearance, pair up in order (prefix and count must agree, the mapping stays one to
    one); a command is run with the page's ids replaced by the run's. Returns the runs
    and the mapping (page id -> run id).
    """
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": WIDTH,
    }
    env.pop("LANGGRAPH_EFFECTS_DB", None)
    ids: dict[str, str] = {}
    ran: list[Ran] = []
    for command, printed in commands_of(section):
        unknown = [token for token in ids_in_order(command) if token not in ids]
        assert not unknown, f"$ {command}: uses {unknown}, which no earlier output printed"
        actual = IDS.sub(lambda m: ids[m.group(0)], command)
        run = subprocess.run(
            shlex.split(actual), cwd=cwd, env=env, capture_output=True, text=True, timeout=240
        )
        output = NOTICE.sub("", run.stdout + run.stderr, count=1)
        shown = [token for token in ids_in_order(printed) if token not in ids]
        seen = set(ids.values())
        new = [token for token in ids_in_order(output) if token not in seen]
        assert [t.split("_")[0] for t in new] == [t.split("_")[0] for t in shown], (
            f"$ {actual}: the page shows new ids {shown}, this run printed {new} (regenerate "
            f"the section from a run of examples/support_agent.py):\n{output[-3000:]}"
        )
        ids.update(zip(shown, new, strict=True))
        ran.append(Ran(actual, printed, output, run.returncode))
    return ran, ids


def test_when_something_crashed_runs_as_printed(tmp_path: Path) -> None:
    section = crash_walkthrough()
    commands = commands_of(section)
    assert commands and commands[0][0] == "python support_agent.py crash", commands[:1]
    assert any("recover --graph support_agent:make_graph" in c for c, _ in commands)
    shutil.copy(SUPPORT_AGENT, tmp_path / "support_agent.py")
    ran, ids = run_section(section, tmp_path)
    readme_id = {run_id: shown for shown, run_id in ids.items()}
    assert len(readme_id) == len(ids), ids  # one to one
    for r in ran:
        output = IDS.sub(lambda m: readme_id.get(m.group(0), m.group(0)), r.output)
        expected_code = 3 if r.printed.lstrip().startswith("error:") else 0
        assert r.returncode == expected_code, f"$ {r.command}\n{r.output[-3000:]}"
        assert first_line(output) == first_line(r.printed), f"$ {r.command}\n{r.output[-3000:]}"
        # The ids the page prints under the command, this run printed in the same order.
        assert ids_in_order(output) == ids_in_order(r.printed), (
            f"$ {r.command}: the page shows {ids_in_order(r.printed)} (regenerate the section "
            f"from a run of examples/support_agent.py):\n{r.output[-3000:]}"
        )
    helpdesk = Provider(tmp_path / "helpdesk.sqlite", "blind")
    billing = Provider(tmp_path / "billing.sqlite", "dedup")
    assert len(helpdesk.effects()) == 1 and helpdesk.count_requests("apply") == 1  # never re-sent
    assert len(billing.effects()) == 1 and billing.count_requests("apply") == 2  # re-sent, deduplicated


def test_hand_built_graph_snippet_runs(tmp_path: Path) -> None:
    """The documentation's ``EffectToolNode`` snippet, with the quickstart's tool and model, runs
    (its top-level ``async with`` wrapped in a coroutine) and sends one invoice."""
    section = page_body("graphs.md")
    snippet = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert snippet is not None
    head, _, block = snippet.group(1).partition("\nasync with ")
    body = "\n".join("    " + line for line in ("async with " + block).splitlines())
    definitions = QUICKSTART.read_text().split('if __name__ == "__main__":')[0]
    script = f"{definitions}\n{head}\n\nasync def main():\n{body}\n\nasyncio.run(main())\n"
    (tmp_path / "snippet.py").write_text(script)
    env = {**os.environ, "QUICKSTART_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "snippet.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    billing = Provider(tmp_path / "billing.sqlite", "dedup")
    assert len(billing.effects()) == 1 and billing.count_requests("apply") == 1


def run_in(cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": WIDTH}
    return subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_walkthrough_runs_again_in_the_same_directory(tmp_path: Path) -> None:
    """A second ``crash`` starts over (an earlier run's threads have finished: nothing would
    be killed) instead of failing with "was not killed"."""
    shutil.copy(SUPPORT_AGENT, tmp_path / "support_agent.py")
    first = run_in(tmp_path, sys.executable, "support_agent.py", "crash")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "starting over" not in first.stdout
    # The README's step 3: recovery finishes both threads; the files stay behind.
    recovered = run_in(
        tmp_path, sys.executable, "-m", "langgraph_effects.cli", "--db", "agent.sqlite",
        "recover", "--graph", "support_agent:make_graph", "--min-idle", "0",
    )
    assert recovered.returncode in (0, 6), recovered.stdout + recovered.stderr
    again = run_in(tmp_path, sys.executable, "support_agent.py", "crash")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[0] == (
        "starting over: removed agent.sqlite, helpdesk.sqlite, billing.sqlite of an earlier run"
    )
    assert again.stdout.splitlines()[1:] == first.stdout.splitlines()
    # From the providers' own files: this run's two effects, nothing of the earlier one.
    assert len(Provider(tmp_path / "helpdesk.sqlite", "blind").effects()) == 1
    assert len(Provider(tmp_path / "billing.sqlite", "dedup").effects()) == 1


def crashtest_example(cwd: Path, factory: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``langgraph-effects crashtest support_agent:FACTORY --probe support_agent:probe`` in ``cwd``."""
    proc = run_in(
        cwd, sys.executable, "-m", "langgraph_effects.cli", "crashtest", f"support_agent:{factory}",
        "--probe", "support_agent:probe", "--json", "report.json",
    )
    assert (cwd / "report.json").exists(), proc.stdout + proc.stderr
    return proc, json.loads((cwd / "report.json").read_text())


def held_per_thread(cwd: Path) -> Counter[str]:
    """Effects per thread, read from the two providers' own files."""
    helpdesk, billing = Provider(cwd / "helpdesk.sqlite", "blind"), Provider(cwd / "billing.sqlite", "dedup")
    held = [*helpdesk.effects(), *billing.effects()]
    return Counter(effect.payload["thread"] for effect in held)


def test_crashtest_runs_on_the_support_agent_as_the_docs_print_it(tmp_path: Path) -> None:
    """From the directory holding support_agent.py: today's graph (no middleware) duplicates,
    the protected one ends every faulted run with exactly the control run's effects; the
    probe's counts are the providers' own records."""
    shutil.copy(SUPPORT_AGENT, tmp_path / "support_agent.py")
    plain, report = crashtest_example(tmp_path, "make_plain_graph")
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert "crashtest: NOT crash-safe" in plain.stdout
    held = held_per_thread(tmp_path)
    assert held[report["control_thread"]] == report["expected"] == 2  # a ticket and an invoice
    assert {run["tool"] for run in report["runs"]} == {"open_ticket", "send_invoice"}
    duplicated = [run for run in report["runs"] if run["outcome"] == "duplicated"]
    assert {run["tool"] for run in duplicated} == {"open_ticket", "send_invoice"}
    for run in report["runs"]:
        assert run["effects"] == held[run["thread_id"]], run

    safe, report = crashtest_example(tmp_path, "make_graph")
    assert safe.returncode == 0, safe.stdout + safe.stderr
    held = held_per_thread(tmp_path)
    assert {run["point"] for run in report["runs"]} >= {"after-tool", "after-intent", "before-outcome"}
    for run in report["runs"]:
        assert run["effects"] == held[run["thread_id"]] == 2, run
    # The blind ticket went to review and was answered from the probe; the invoice never did.
    assert all(run["reviews"] == 0 for run in report["runs"] if run["tool"] == "send_invoice")
    assert any(run["reviews"] > 0 for run in report["runs"] if run["tool"] == "open_ticket")


WITHOUT_LANGCHAIN = """
import runpy, sys
sys.modules["langchain"] = None  # as on a base install: `pip install langgraph-effects`, no extra
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("script", [QUICKSTART, SUPPORT_AGENT], ids=["quickstart", "support_agent"])
def test_without_langchain_the_examples_name_the_extra_to_install(script: Path, tmp_path: Path) -> None:
    env = {**os.environ, "QUICKSTART_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_LANGCHAIN, str(script), "crash"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last == (
        "langgraph_effects.errors.MissingExtraError: EffectMiddleware needs langchain, which is not "
        """installed. Install it with the 'agents' extra: pip install "langgraph-effects[agents]\""""
    ), run.stderr[-2000:]
    assert not list(tmp_path.iterdir())  # nothing ran: no worker, no file


def test_importing_effect_middleware_without_langchain_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['langchain'] = None\n"
        "from langgraph_effects import MissingExtraError\n"
        "try:\n    from langgraph_effects import EffectMiddleware\n"
        "except ImportError as error:\n"
        "    assert isinstance(error, (MissingExtraError, ModuleNotFoundError)), type(error)\n"
        "    print(error.extra, error.module, error.name, '|', error)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("|")[0].split() == ["agents", "langchain", "langchain"]
    assert 'pip install "langgraph-effects[agents]"' in run.stdout


def test_the_quickstart_leaves_no_temporary_directory(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("QUICKSTART_DIR", None)
    run = subprocess.run(
        [sys.executable, str(QUICKSTART)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-1] == "billing provider: 1 invoice(s), 2 request(s)"
    # Its data directory (the worker's too) is gone; the lease lock directory is shared by design.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("quickstart-")] == []
    assert [p.name for p in tmp_path.iterdir()] == [f"langgraph-effects-{os.getuid()}"]
