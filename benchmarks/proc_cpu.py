"""CPU time so far of a process or thread, read from Linux's ``/proc`` (no other import:
``turn_profile.py`` imports it before it chooses the checkout of the package)."""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def stat_cpu(path: str) -> float:
    """CPU seconds (user and system) of the process or thread whose ``stat`` file is
    ``path`` (``/proc/<pid>/stat``, ``/proc/self/task/<tid>/stat``); 0 when it is gone."""
    try:
        with open(path) as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK
