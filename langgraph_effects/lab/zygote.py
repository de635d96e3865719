"""Imported last by the lab's fork server, never elsewhere: the state every worker
forks from.

The fork server imports LangGraph and the lab once, and every worker is a fork of
it, sharing those pages until it writes to them. Two things would make each worker
redo or rewrite what the server already has:

* a program started by path (the ``langgraph-effects`` console script) has its
  ``__main__`` run again in every worker (multiprocessing's ``_fixup_main_from_path``:
  the whole console imported per worker), unless the fork server already has that
  ``__main__``. multiprocessing's own preload of ``"__main__"`` never receives the
  path (CPython 3.11 and 3.12 look for a key the parent does not send), so the lab
  names it in `MAIN_ENV` and the server imports it here, as a worker
  would (``python -m`` runs have no path: nothing to import);
* Python's cyclic garbage collector writes to every object it walks, so each
  worker's first full collection would copy most inherited pages. What the server
  imported is collected once and frozen (`gc.freeze`), as CPython's
  documentation advises for a process that forks workers.
"""

from __future__ import annotations

import gc
import os
from multiprocessing import process, spawn

from .driver import MAIN_ENV


def _prepare() -> None:
    path = os.environ.get(MAIN_ENV)
    if path:
        # What the fork server's own "__main__" preload does once it has the path.
        me: object = process.current_process()
        setattr(me, "_inheriting", True)  # noqa: B010 (multiprocessing's private flag)
        try:
            spawn.import_main_path(path)
        finally:
            delattr(me, "_inheriting")
    gc.collect()
    gc.freeze()


_prepare()
