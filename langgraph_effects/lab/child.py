"""The ``child-process`` column: a tool whose request leaves from a child process.

The tool's client starts a child (``subprocess.Popen``, default ``close_fds``) that
sends the request to the provider and prints the answer; the tool waits for it,
as a tool shelling out to ``curl`` or a CLI would. A SIGKILLed worker does not take
its child along: the child is reparented and still sends.

The child of an armed attempt waits before sending until someone else has talked
to the provider since the tool started it (the resumer's lookup or re-send), or the
lab has seen the resume return (`resume_returned`: the resumer decided without
asking the provider), or `CHILD_MAX_WAIT` passed: its request is still on its
way while the resumer decides, however long the resumer takes to start.

Only the faulted attempt's request goes through a child (an interpreter start
costs about 0.1 s, and the path under test is the killed one); every other request
of the column leaves from the worker itself.

The child runs this file as a script (``python -I -S child.py ARGS``): it imports
only the standard library and the lab's provider module (without the package's
``__init__``, which would cost a second of imports per request). Every child
leaves a marker file until it is done, so the lab counts only once the last
straggler has sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .providers import Provider, Receipt

#: How long an armed child waits at most for the resumer to decide first (a resumer
#: that rightly waits for the child to finish waits this long).
CHILD_MAX_WAIT = 3.0
#: How often it looks.
CHILD_POLL = 0.01
#: How long the lab waits, after a cell, for children still on their way.
STRAGGLER_WAIT = 15.0


def send_via_child(
    provider: Provider,
    payload: Mapping[str, Any],
    *,
    key: str | None,
    markers: Path,
    armed: bool,
    started: Any = None,
) -> Receipt:
    """Send ``payload`` from a child process and wait for its answer (the worker side).

    ``armed``: the child waits for someone else's request first (see the module).
    ``started(pid)`` is called once the child runs (the lab's kill point).
    """
    from . import providers

    markers.mkdir(parents=True, exist_ok=True)
    marker = markers / uuid.uuid4().hex
    marker.touch()
    args = {
        "package": str(Path(__file__).resolve().parent.parent),
        "path": str(provider.path),
        "mode": provider.mode,
        "retention": provider.retention,
        "lag": provider.lag,
        "processing_time": provider.processing_time,
        "payload": dict(payload),
        "key": key,
        "wait": CHILD_MAX_WAIT if armed else 0.0,
        "after": provider.last_request_id(),
        "returned": str(_returned(markers)),
        "returned_size": _size(_returned(markers)),
        "marker": str(marker),
    }
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", __file__, json.dumps(args)],
        stdout=subprocess.PIPE,
        text=True,
    )
    if started is not None:
        started(child.pid)
    out, _ = child.communicate()
    answer = json.loads(out or "{}")
    if "receipt" in answer:
        return providers.Receipt(**answer["receipt"])
    error = getattr(providers, str(answer.get("error")), None)
    if isinstance(error, type) and issubclass(error, Exception):
        raise error(answer.get("message", ""))
    raise RuntimeError(f"the child sender failed (exit code {child.returncode}): {out!r}")


def _returned(markers: Path) -> Path:
    return markers.parent / "resumes-returned"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def resume_returned(markers: Path) -> None:
    """The lab saw a resume return: children still waiting for the resumer send now."""
    with _returned(markers).open("a") as log:
        log.write(".")


def await_stragglers(markers: Path, timeout: float = STRAGGLER_WAIT) -> int:
    """Wait until every child sender is done (its marker gone); how many are still not."""
    deadline = time.monotonic() + timeout
    while markers.is_dir() and any(markers.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(list(markers.iterdir())) if markers.is_dir() else 0


def _child(args: dict[str, Any]) -> dict[str, Any]:  # pragma: no cover - runs in the child
    package = args["package"]
    lab = os.path.join(package, "lab")
    for name, path in (("langgraph_effects", package), ("langgraph_effects.lab", lab)):
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module
    from langgraph_effects.lab import providers

    provider = providers.Provider(
        args["path"],
        args["mode"],
        retention=args["retention"],
        lag=args["lag"],
        processing_time=args["processing_time"],
    )
    deadline = time.monotonic() + float(args["wait"])
    returned, seen = Path(args["returned"]), int(args["returned_size"])
    while (
        time.monotonic() < deadline
        and provider.last_request_id() <= int(args["after"])
        and _size(returned) <= seen
    ):
        time.sleep(CHILD_POLL)
    try:
        receipt = provider.apply(args["payload"], key=args["key"])
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)}
    finally:
        provider.close()
    return {
        "receipt": {
            "effect_id": receipt.effect_id,
            "operation": receipt.operation,
            "key": receipt.key,
            "at": receipt.at,
            "replayed": receipt.replayed,
        }
    }


if __name__ == "__main__":  # pragma: no cover - the child process
    arguments = json.loads(sys.argv[1])
    try:
        answer = json.dumps(_child(arguments))
        try:
            print(answer, flush=True)
        except BrokenPipeError:
            # Its worker was SIGKILLed: nobody reads the answer (the request was sent).
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        Path(arguments["marker"]).unlink(missing_ok=True)
