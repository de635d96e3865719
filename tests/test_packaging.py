"""What an install gives a user: a type-checkable editable install, a wheel holding only
the package, and ``langgraph-effects --version``."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# slow (setuptools builds in a subprocess); one group: both builds write build/ and the
# egg-info in the project root, so they must not run at once on two xdist workers
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]

ROOT = Path(__file__).resolve().parents[1]

BUILD = """
import sys
from setuptools import build_meta
print(getattr(build_meta, sys.argv[1])(sys.argv[2]))
"""


def build(hook: str, out: Path) -> zipfile.ZipFile:
    """Run the PEP 517 hook ``hook`` (build_wheel / build_editable) of this project into ``out``."""
    run = subprocess.run(
        [sys.executable, "-c", BUILD, hook, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return zipfile.ZipFile(out / run.stdout.strip().splitlines()[-1])


def test_the_editable_install_is_a_path_entry_type_checkers_can_follow(tmp_path: Path) -> None:
    """``pip install -e .`` must not install setuptools' import-hook finder: mypy and pyright
    cannot follow it and report langgraph_effects as missing in the user's project. A .pth
    line naming the project root is what they read."""
    wheel = build("build_editable", tmp_path)
    names = wheel.namelist()
    assert not [n for n in names if n.endswith("_finder.py")], names  # no import hook
    [pth] = [n for n in names if n.endswith(".pth")]
    lines = wheel.read(pth).decode().splitlines()
    assert [Path(line).resolve() for line in lines] == [ROOT], lines
    assert (ROOT / "langgraph_effects" / "py.typed").exists()


def test_a_wheel_holds_the_package_and_its_py_typed_only(tmp_path: Path) -> None:
    names = build("build_wheel", tmp_path).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"langgraph_effects", "langgraph_effects-0.1.0.dist-info"}
    assert "langgraph_effects/py.typed" in names
    assert "langgraph_effects-0.1.0.dist-info/licenses/LICENSE" in names
