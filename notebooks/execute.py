"""Execute the notebooks with nbclient and store their outputs (so they read well on GitHub).

    python notebooks/execute.py                     # every notebook, in place
    python notebooks/execute.py 01_quickstart.ipynb

A cell that raises (an ``assert effects == 1`` included) stops the run with the
cell's error and leaves the notebook file unchanged. ``tests/test_notebooks.py``
runs the same function on a copy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
NOTEBOOKS = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))


def execute(path: Path, *, write_to: Path | None = None, cell_timeout: int = 300) -> nbformat.NotebookNode:
    """Run every cell of ``path`` in a fresh ``python3`` kernel started in the notebooks folder."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=cell_timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(HERE)}},
    )
    client.execute()
    notebook.metadata.pop("widgets", None)
    nbformat.validate(notebook)
    nbformat.write(notebook, write_to or path)
    return notebook


def main(names: list[str]) -> int:
    paths = [HERE / name for name in names] if names else NOTEBOOKS
    for path in paths:
        print(f"executing {path.name} ...", flush=True)
        execute(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
