"""The README's state diagram is generated from the transition table, not drawn by hand."""

from __future__ import annotations

from pathlib import Path

from langgraph_effects.operation import mermaid

README = Path(__file__).resolve().parents[1] / "README.md"


def test_state_diagram_matches_the_table() -> None:
    text = README.read_text()
    block = text.split("<!-- states:start -->", 1)[1].split("<!-- states:end -->", 1)[0]
    assert block.strip() == f"```mermaid\n{mermaid()}\n```", (
        "README state diagram is stale: paste the output of "
        "`python -c 'from langgraph_effects.operation import mermaid; print(mermaid())'`"
    )
