"""Execute the notebooks with nbclient and store their outputs (so they read well on GitHub).

    python notebooks/execute.py                     # every notebook, in place
    python notebooks/execute.py 01_quickstart.ipynb

A cell that raises (an ``assert effects == 1`` included) stops the run with the
cell's error and leaves the notebook file unchanged. ``tests/test_notebooks.py``
runs the same function on a copy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOTEBOOKS = sorted(HERE.glob("[0-9][0-9]_*.ipynb"))


def execute(path: Path, *, write_to: Path | None = None, cell_timeout: int = 300) -> Any:
    """Run every cell of ``path`` in a fresh ``python3`` kernel started in the notebooks folder."""
    import nbformat  # the notebooks extra; imported here so that --help works without it
    from nbclient import NotebookClient

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


def parse(argv: list[str]) -> list[Path]:
    """The notebooks named on the command line (all of them when none is named)."""
    names = [path.name for path in NOTEBOOKS]
    parser = argparse.ArgumentParser(
        prog="python notebooks/execute.py",
        description="Execute the notebooks in fresh kernels and store their outputs in place. A cell "
        "that raises stops the run and leaves that notebook unchanged. Needs the notebooks extra: "
        'pip install -e ".[notebooks]".',
    )
    parser.add_argument(
        "notebooks", nargs="*", metavar="NOTEBOOK", help=f"default: all of them ({', '.join(names)})"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.notebooks if Path(name).name not in names]
    if unknown:
        parser.error(f"no such notebook: {', '.join(unknown)} (choose from {', '.join(names)})")
    return [HERE / Path(name).name for name in args.notebooks] or NOTEBOOKS


def main(argv: list[str]) -> int:
    paths = parse(argv)
    try:
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ModuleNotFoundError as error:
        print(f'{error}: install the notebooks extra, pip install -e ".[notebooks]"', file=sys.stderr)
        return 2
    for path in paths:
        print(f"executing {path.name} ...", flush=True)
        execute(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
