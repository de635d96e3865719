"""The notebooks: each one is executed with nbclient in a fresh kernel (on a copy, so the
stored outputs stay as committed); a cell that raises, an asserted count included,
fails the test. The committed notebooks must carry their outputs, so they read well
on GitHub.

Needs the ``notebooks`` and ``examples`` extras. Without them these tests skip,
except under ``CI=true``, where a missing extra is a failure.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import require_extra

pytestmark = pytest.mark.slow  # runs the notebooks in kernels

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOKS = ROOT / "notebooks"
NAMES = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


for _module in ("nbformat", "nbclient", "ipykernel", "matplotlib", "starlette", "uvicorn", "httpx"):
    require_extra(_module, "notebooks")

import nbformat  # noqa: E402
from nbclient.exceptions import CellExecutionError  # noqa: E402


def load_executor() -> Any:
    spec = importlib.util.spec_from_file_location("notebooks_execute", NOTEBOOKS / "execute.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The notebooks that draw a chart (a PNG among their outputs).
CHARTS = {"03_crash_lab.ipynb", "06_observing.ipynb"}


def test_there_are_six_notebooks() -> None:
    assert NAMES == [
        "01_quickstart.ipynb",
        "02_operator_review.ipynb",
        "03_crash_lab.ipynb",
        "04_crashtest.ipynb",
        "05_mcp_agent.ipynb",
        "06_observing.ipynb",
    ]


@pytest.mark.parametrize("name", NAMES)
def test_the_committed_notebook_carries_its_outputs(name: str) -> None:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count is not None for cell in code), "execute it: notebooks/execute.py"
    outputs = [output for cell in code for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    if name in CHARTS:
        assert any("image/png" in o.get("data", {}) for o in outputs), "the chart is missing"


#: The crash-lab notebook runs the whole lab grid; its own xdist group starts it first.
LONGEST = "03_crash_lab.ipynb"


@pytest.mark.crash
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xdist_group("notebook_lab")) if n == LONGEST else n for n in NAMES],
)
def test_notebook_executes(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The crash lab at 10 operations per cell (the notebook's own 20 when run by hand):
    # every cell still faults twice (every 5th operation), and the notebook asserts what
    # it always does (seed rows duplicate or lose, ours exactly once in every cell).
    monkeypatch.setenv("CRASH_LAB_OPS", "10")
    # The observing notebook saves its timeline here (by hand: docs/img/, shown on docs/observing.md).
    monkeypatch.setenv("NOTEBOOK_FIGURES", str(tmp_path / "figures"))
    execute = load_executor().execute
    try:
        notebook = execute(NOTEBOOKS / name, write_to=tmp_path / name, cell_timeout=300)
    except CellExecutionError as error:
        pytest.fail(f"{name}: a cell failed:\n{str(error)[-4000:]}")
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    if name in CHARTS:
        assert any("image/png" in o.get("data", {}) for o in outputs), "the run produced no chart"
    if name == "06_observing.ipynb":
        assert (tmp_path / "figures" / "observing-timeline.png").stat().st_size > 0


def test_the_executor_has_help_and_refuses_an_unknown_notebook() -> None:
    import subprocess
    import sys

    script = str(NOTEBOOKS / "execute.py")
    shown = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: python notebooks/execute.py [-h] [NOTEBOOK ...]")
    assert "04_crashtest.ipynb" in shown.stdout
    wrong = subprocess.run(
        [sys.executable, script, "05_nope.ipynb"], capture_output=True, text=True, timeout=60
    )
    assert wrong.returncode == 2
    assert "no such notebook: 05_nope.ipynb (choose from 01_quickstart.ipynb," in wrong.stderr
    assert "Traceback" not in wrong.stderr
