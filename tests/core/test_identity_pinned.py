"""Operation ids and args hashes, pinned to the values earlier releases derived.

A ledger written by an earlier version must be found again after an upgrade: a call
resumed from its checkpoint derives its operation id anew and looks it up. Any
change to how ids or hashes are computed (even a faster one) must give these."""

from __future__ import annotations

from langgraph_effects.core import identity


def test_args_hashes_are_pinned() -> None:
    args = {"n": 3, "s": "x\ud800y", "d": {"b": 1, "a": [1.5, None]}}
    assert identity.args_hash(args) == "h1:86af16d81d550bd2412fb3dbee2085bccd52fdf5f6612245d15bd8b056ae31a5"
    assert identity.args_hash({"n": 3}, key=b"k") == (
        "h1k:cd40d0d93d2684c36b6eb9674532e556ef4ad48a6d7c1b535299ad90237a69b9"
    )
    assert identity.canonical_json({"s": "x\ud800y", "é": 1}) == '{"s":"x?y","é":1}'


def test_operation_ids_are_pinned() -> None:
    op_id = identity.operation_id(
        thread_id="t", namespace="tools", turn="v:1", call_key="call_3", args_hash="h1:abc"
    )
    assert op_id == "op_20db975af576d8e9aaffbccb131bef76"
    logical = identity.logical_operation_id(tenant="t", provider_key="pk")
    assert logical == "op_322644aea2956cbb3fb956f6b2ec7e9a"
    assert identity.edited_operation_id("op_x", "h1:y") == "op_e091ff0a68190ed76d597072686e41d0"
