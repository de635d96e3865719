"""The README's walkthroughs run exactly as printed.

* The quickstart is ``examples/quickstart.py`` verbatim; the script runs on a fresh
  install with no API key, SIGKILLs its own worker mid-call, resumes, and the billing
  provider's own records hold one invoice.
* Every command of "When something crashed" runs, in order, as subprocesses against a
  real SQLite file, with ``examples/support_agent.py`` as the agent; the exit codes and
  the ids it prints are the README's, and the providers hold one effect each.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from langgraph_effects.testing import Provider

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICKSTART = ROOT / "examples" / "quickstart.py"
SUPPORT_AGENT = ROOT / "examples" / "support_agent.py"
WIDTH = "100"  # the terminal width the README's console output was printed at

pytestmark = pytest.mark.crash


def readme_section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_readme_quickstart_is_the_script() -> None:
    text = README.read_text()
    block = text.split("<!-- quickstart:start -->", 1)[1].split("<!-- quickstart:end -->", 1)[0]
    shown = block.strip().removeprefix("```python").removesuffix("```").strip()
    assert shown == QUICKSTART.read_text().strip(), (
        "the README's quickstart differs from examples/quickstart.py: paste the file between "
        "the quickstart markers"
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


def test_when_something_crashed_runs_as_printed(tmp_path: Path) -> None:
    commands = commands_of(readme_section("When something crashed"))
    assert commands and commands[0][0] == "python support_agent.py crash", commands[:1]
    assert any("recover --graph support_agent:make_graph" in c for c, _ in commands)
    shutil.copy(SUPPORT_AGENT, tmp_path / "support_agent.py")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": WIDTH,
    }
    env.pop("LANGGRAPH_EFFECTS_DB", None)
    for command, printed in commands:
        run = subprocess.run(
            shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
        )
        output = run.stdout + run.stderr
        expected_code = 3 if printed.lstrip().startswith("error:") else 0
        assert run.returncode == expected_code, f"$ {command}\n{output[-3000:]}"
        assert first_line(output) == first_line(printed), f"$ {command}\n{output[-3000:]}"
        for token in sorted(set(re.findall(r"\b(?:op|lge)_[0-9a-f]{32}\b", printed))):
            assert token in output, (
                f"$ {command}: the README shows {token}, this run did not print it (regenerate the "
                f"section from a run of examples/support_agent.py):\n{output[-3000:]}"
            )
    helpdesk = Provider(tmp_path / "helpdesk.sqlite", "blind")
    billing = Provider(tmp_path / "billing.sqlite", "dedup")
    assert len(helpdesk.effects()) == 1 and helpdesk.count_requests("apply") == 1  # never re-sent
    assert len(billing.effects()) == 1 and billing.count_requests("apply") == 2  # re-sent, deduplicated


def test_hand_built_graph_snippet_runs(tmp_path: Path) -> None:
    """The README's ``EffectToolNode`` snippet, with the quickstart's tool and model, runs
    (its top-level ``async with`` wrapped in a coroutine) and sends one invoice."""
    section = readme_section("Hand-built graphs: `EffectToolNode`")
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
