"""Crash-test your own graph: ``langgraph-effects crashtest`` and `crashtest`.

A control run without faults gives the effects each thread should hold; then, for
every fault point and every tool call the control run made, a fresh thread runs
in a worker process faulted there (a real SIGKILL, or a timeout) and is resumed in
fresh processes until it finishes. The user's probe counts the effects the
provider holds per thread; a faulted thread that ends with more or fewer than
the control run's is a duplicate or a loss. Works on any LangGraph graph: the
tool-level faults come through LangChain's callbacks, which reach every tool.
"""

from .core import (
    POINTS,
    CrashReport,
    CrashtestRunError,
    CrashtestUsageError,
    RunResult,
    crashtest,
)

__all__ = ["POINTS", "CrashReport", "CrashtestRunError", "CrashtestUsageError", "RunResult", "crashtest"]
