"""Loading a ``MODULE:ATTR`` target (``--graph``, a crash test's factory and probe) with
advice that fits the failure.

"Cannot import it" covers three different mistakes, each with its own fix: the module
is not on the import path (run from its directory), the module is found but raises
while importing (a dependency of *its* is missing, say), or it imports but has no such
attribute (a typo, or another file of the same name came first on the path).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

from ..errors import TargetNotFoundError


def load_target(target: str) -> Any:
    """The object ``target`` names (``MODULE:ATTR``, dotted attributes allowed).

    The current directory is put on ``sys.path`` first (as ``python -m`` would), so a
    module beside the caller imports. Raises
    [`TargetNotFoundError`][langgraph_effects.errors.TargetNotFoundError] saying which of the three failures
    it was and what to do.
    """
    module_name, _, attribute = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise TargetNotFoundError(
            target, module_name, attribute, None, _import_failure(module_name, error)
        ) from error
    found: Any = module
    path = getattr(module, "__file__", None)
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise TargetNotFoundError(
                target, module_name, attribute, path, _missing_attribute(module, attribute)
            )
        found = getattr(found, part)
    return found


def _import_failure(module_name: str, error: Exception) -> str:
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if missing is not None and (module_name == missing or module_name.startswith(missing + ".")):
        file = module_name.replace(".", "/") + ".py"
        return (
            f"no module {module_name!r} on the import path (the current directory {os.getcwd()} and "
            f"PYTHONPATH). Run from the directory that holds {file} (for the README's examples: "
            "cd examples), or add that directory to PYTHONPATH."
        )
    return (
        f"importing {module_name!r} raised {type(error).__name__}: {error}. The module was found; "
        "fix the error it raises while importing (run `python -c 'import "
        f"{module_name}'` to see the traceback)."
    )


def _missing_attribute(module: Any, attribute: str) -> str:
    where = getattr(module, "__file__", None) or "a namespace package"
    defined = sorted(
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and not name.startswith("_")
        and getattr(value, "__module__", None) == module.__name__
    )
    listed = f"; it defines {', '.join(defined)}" if defined else "; it defines no functions"
    return (
        f"the module {module.__name__!r} was imported from {where}, which has no attribute "
        f"{attribute!r}{listed}. Check the name after the colon, or whether another file of that "
        "name comes first on the import path."
    )
