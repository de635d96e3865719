"""Checking that a test released every dispatch lease it took, in this process.

``lease._held`` is process-wide, so a check of it being empty blames every later
test for one leak. :func:`released_leases` compares against what was held before
the test, names only the test's own leftovers and releases them, so the tests
after it start clean.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from langgraph_effects._runtime import lease


def _drop(tokens: set[str]) -> None:
    with lease._held_lock:
        slots = [lease._held.pop(token, None) for token in tokens]
    for slot in slots:
        if slot is not None:
            with contextlib.suppress(OSError):
                os.close(slot.fd)  # the kernel drops the flock: its dispatch reads as over


@contextlib.contextmanager
def released_leases() -> Iterator[None]:
    """Fail if the block leaves a dispatch lease of its own held in this process."""
    before = set(lease._held)
    yield
    leaked = set(lease._held) - before
    _drop(leaked)
    assert not leaked, f"{len(leaked)} dispatch lease(s) taken here were never released"
