"""What a saver remembers of its own saves (``Written``): the same header as reading the
checkpoint back, at no cost to Python's garbage collector."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects.checkpoint._fence import _REMEMBERED, Written


def _save(written: Written, checkpoint_id: str, parent: str | None, **metadata: Any) -> dict[str, Any]:
    checkpoint: Any = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    checkpoint["channel_versions"] = {"messages": "00000000000000000000000000000002.0.5", "n": 3}
    checkpoint["versions_seen"] = {"agent": {"messages": "00000000000000000000000000000001.0.1"}, "tools": {}}
    conf = {"thread_id": "t\udc80", "checkpoint_ns": "sub:1"}
    saved: Any = {"configurable": {**conf, "checkpoint_id": checkpoint_id}}
    config: Any = {"configurable": {**conf, **({"checkpoint_id": parent} if parent else {})}}
    written.add(saved, checkpoint, metadata, config)  # type: ignore[arg-type]
    return checkpoint  # type: ignore[no-any-return]


def test_the_header_is_what_was_saved() -> None:
    written = Written()
    checkpoint = _save(written, "c2", "c1", source="loop", step=4, parents={"": "x"}, user="kept out")
    header = written.header("t\udc80", "sub:1", "c2")
    assert header is not None
    assert header.checkpoint["id"] == "c2"
    assert header.checkpoint["channel_versions"] == checkpoint["channel_versions"]
    assert header.checkpoint["versions_seen"] == checkpoint["versions_seen"]
    assert header.metadata == {"source": "loop", "step": 4}  # what reading a turn looks at
    where = {"thread_id": "t\udc80", "checkpoint_ns": "sub:1", "checkpoint_id": "c2"}
    assert header.config["configurable"] == where
    assert header.parent_config is not None
    assert header.parent_config["configurable"]["checkpoint_id"] == "c1"
    # Another thread or namespace with the same checkpoint id is not this one.
    assert written.header("t\udc80", "", "c2") is None
    assert written.header("other", "sub:1", "c2") is None
    assert written.has_child("c1") and not written.has_child("c2")


def test_a_root_has_no_parent_config_and_the_memory_is_bounded() -> None:
    written = Written()
    _save(written, "root", None, source="input", step=-1)
    header = written.header("t\udc80", "sub:1", "root")
    assert header is not None and header.parent_config is None
    for i in range(_REMEMBERED + 10):
        _save(written, f"c{i}", f"c{i - 1}" if i else "root", source="loop", step=i)
    assert "root" not in written and "c0" not in written
    assert f"c{_REMEMBERED + 9}" in written and written.has_child(f"c{_REMEMBERED + 8}")
    assert not written.has_child("root")  # forgotten with the child that named it


def test_entries_leave_the_garbage_collectors_watch() -> None:
    """A stream of long-lived tracked objects makes CPython run full collections of the
    whole process; the remembered entries stop being tracked at the first collection."""
    written = Written()
    for i in range(50):
        _save(written, f"c{i}", f"c{i - 1}" if i else None, source="loop", step=i, parents={"": "p"})
    gc.collect(0)
    entries = list(written._ids.values())
    assert entries and not any(gc.is_tracked(entry) for entry in entries)


async def test_a_saver_remembers_what_reading_back_finds(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("hi")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    async with AsyncEffectSqliteSaver.from_conn_string(tmp_path / "w.sqlite") as saver:
        await saver.setup()
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "remember"}}
        await graph.ainvoke({"messages": [HumanMessage("hello")]}, config)
        checked = 0
        async for stored in saver.alist(config):
            conf = stored.config["configurable"]
            header = saver.saved_header("remember", conf["checkpoint_ns"], conf["checkpoint_id"])
            assert header is not None
            assert header.checkpoint["channel_versions"] == stored.checkpoint["channel_versions"]
            assert header.checkpoint["versions_seen"] == stored.checkpoint["versions_seen"]
            assert header.metadata == {k: stored.metadata[k] for k in ("source", "step")}  # type: ignore[literal-required]
            assert (header.parent_config or {}).get("configurable", {}).get("checkpoint_id") == (
                (stored.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            )
            checked += 1
        assert checked >= 3


def test_versions_json_would_change_are_not_kept_but_the_save_still_counts_as_ours() -> None:
    """A custom saver's versions that JSON would not give back as they are (here a
    bool, and a non-string node name) get no header: the tool task reads the
    checkpoint back. The save is still this saver's for the one-runner check."""
    written = Written()
    checkpoint: Any = empty_checkpoint()
    checkpoint["id"] = "odd"
    checkpoint["channel_versions"] = {"messages": True}
    checkpoint["versions_seen"] = {7: {"messages": 1}}
    saved: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "odd"}}
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "before"}}
    written.add(saved, checkpoint, {"source": "loop", "step": 1}, config)
    assert written.header("t", "", "odd") is None
    assert "odd" in written and written.has_child("before")
