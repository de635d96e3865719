"""The agent of ``tests/helpers/agent.py`` with the OpenTelemetry SDK configured: a
worker whose spans are written, one JSON line each, to a file when they start and when
they end (a SIGKILL loses the spans still open, never that they were started).

``python -m tests.helpers.traced_agent SPANS_FILE SPEC_JSON`` runs the worker as
``tests.helpers.agent`` does. :func:`make_graph` is a graph factory for the console's
``recover --graph tests.helpers.traced_agent:make_graph``: it reads the agent's spec
from the environment variable ``TRACED_AGENT_SPEC``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from tests.helpers import agent

SPEC_ENV = "TRACED_AGENT_SPEC"


class Written(SpanProcessor):
    """Every span's ids, name and attributes, appended to ``path`` at its start and end."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _write(self, at: str, span: ReadableSpan) -> None:
        context = span.get_span_context()
        line = {
            "at": at,
            "name": span.name,
            "trace_id": f"{context.trace_id:032x}",
            "span_id": f"{context.span_id:016x}",
            "parent": f"{span.parent.span_id:016x}" if span.parent is not None else None,
            "attributes": dict(span.attributes or {}),
        }
        with open(self.path, "a") as out:
            out.write(json.dumps(line, default=str) + "\n")

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._write("start", span)

    def on_end(self, span: ReadableSpan) -> None:
        self._write("end", span)


def read(path: str | Path) -> list[dict[str, Any]]:
    """The lines a worker wrote."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def make_graph(checkpointer: Any) -> Any:
    spec = agent.Spec(**json.loads(os.environ[SPEC_ENV]))
    return agent.build(spec, checkpointer, agent.provider_for(spec))


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(Written(sys.argv[1]))
    trace.set_tracer_provider(provider)
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    agent.main()


if __name__ == "__main__":
    main()
