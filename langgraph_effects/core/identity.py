"""Operation identity: pure functions from durable graph coordinates to ids and keys.

An operation id must come out the same on every later attempt of one call (crash
resume, an ``interrupt()`` re-run, a ``RetryPolicy`` retry, a second worker, time
travel to the checkpoint that holds the call) and differ between two turns that ask
for the same thing. Model-provided ids cannot give that: model servers repeat
message ids and tool call ids (``call_0`` every turn). The id is therefore
anchored on the **turn**: the checkpoint the tool task was prepared from, the one
in which the AIMessage was written, named by its newest channel version (see
`turn_of`). Within that checkpoint the call is told apart by its
``tool_call_id`` (refused when shared within one message) or, for a Functional API
task, by what it is (`langgraph_effects.core.callorder.call_key`). The args hash is
part of the id too, so an edit of the arguments is a new operation.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

#: What a secret field's value is replaced by wherever it is stored or shown.
REDACTED = "[redacted]"
_HASH_KEY_ENV = "LANGGRAPH_EFFECTS_HASH_KEY"


#: The encoder of `canonical_json`, made once (``json.dumps`` makes a new one on
#: every call given options); it keeps no state between calls.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _canonical_utf8(value: Any) -> bytes:
    """`canonical_json` as UTF-8 bytes (what is hashed)."""
    return _CANONICAL.encode(value).encode("utf-8", "replace")


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, non-JSON values as ``str``.

    Always encodable as UTF-8: an unpaired surrogate (``"x\ud800y"``, which JSON from a
    model can carry) becomes ``?``, exactly as LangGraph's checkpoint serializer stores
    it, so a call hashes the same before a crash and after the resume that reads it back.
    """
    return _canonical_utf8(value).decode("utf-8")


def hash_key_from_env() -> bytes | None:
    """The keyed-hash secret from ``LANGGRAPH_EFFECTS_HASH_KEY``, if set."""
    value = os.environ.get(_HASH_KEY_ENV)
    return value.encode() if value else None


def args_hash(args: Mapping[str, Any], *, key: bytes | None = None) -> str:
    """Hash of the canonical JSON of the arguments.

    With ``key`` (a secret kept outside the ledger) it is an HMAC, so low-entropy
    arguments cannot be recovered from the hash by guessing.
    """
    data = _canonical_utf8(args)
    if key:
        return "h1k:" + hmac.new(key, data, hashlib.sha256).hexdigest()
    return "h1:" + hashlib.sha256(data).hexdigest()


def redact(args: Mapping[str, Any], secret_fields: Sequence[str]) -> dict[str, Any]:
    """A copy of ``args`` with each secret field (at any depth) replaced by a marker."""
    secrets = set(secret_fields)

    def walk(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: (REDACTED if k in secrets else walk(v)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return walk(dict(args))  # type: ignore[no-any-return]


def scrub(text: str, args: Mapping[str, Any], secret_fields: Sequence[str]) -> str:
    """``text`` (an error message, say) with every secret argument's value blanked out,
    so evidence stored in the ledger or shown to an operator cannot leak it."""
    if not secret_fields:
        return text
    secrets: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                if k in secret_fields and v is not None:
                    secrets.append(v if isinstance(v, str) else canonical_json(v))
                walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)

    walk(args)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, REDACTED)
    return text


def namespace_path(checkpoint_ns: str) -> str:
    """``"agent:<task>|tools:<task>"`` -> ``"agent|tools"``: the names, without task ids.

    Task ids change under time travel; the names of the nodes do not.
    """
    if not checkpoint_ns:
        return ""
    return "|".join(part.split(":", 1)[0] for part in checkpoint_ns.split("|"))


def _digest(*parts: str) -> str:
    """SHA-256 of each part followed by a NUL byte (one buffer, hashed at once)."""
    return hashlib.sha256(("\x00".join(parts) + "\x00").encode()).hexdigest()[:32]


def turn_of(channel_versions: Mapping[str, Any], checkpoint_id: str) -> str:
    """The turn coordinate of the checkpoint a tool task was prepared from.

    Every channel written in one step gets the same new version, so the newest
    version in the checkpoint names the step that wrote the AIMessage. LangGraph's
    savers (memory, SQLite, Postgres) make versions ``"<counter>.<random>"``: unique
    per write, copied unchanged into the fork that time travel saves, changed by any
    ``update_state``. A saver with plain counter versions (``BaseCheckpointSaver``'s
    default) repeats them on two branches of one thread, so the checkpoint id is
    used instead; the caller passes it already resolved through forks.
    """
    if versions_unique(channel_versions):
        return "v:" + str(max(v for v in channel_versions.values() if v is not None))
    return "c:" + checkpoint_id


def origin_of(versions_seen: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The pre-model coordinate of a checkpoint: what the step that wrote it had read.

    ``versions_seen`` records, per node, the channel versions it last ran on; the
    newest of them is the version of the parent checkpoint's step (the node that
    ran was triggered by a channel that step wrote). A model asked again from the
    same state (time travel or a resume from before the model call: the fork
    copies versions) gives the same value; a new turn or any re-run of an earlier
    step gives another. The ``__interrupt__`` entry is LangGraph's resume marker,
    not a node. ``None`` when the versions do not name one write.
    """
    seen = [
        v
        for node, versions in versions_seen.items()
        if node != "__interrupt__"
        for v in (versions or {}).values()
        if v is not None
    ]
    if seen and all(isinstance(v, str) and "." in v for v in seen):
        return "v:" + str(max(seen))
    return None


def versions_unique(channel_versions: Mapping[str, Any]) -> bool:
    """Whether the saver's versions name one write (``"<counter>.<random>"`` strings)."""
    versions = [v for v in channel_versions.values() if v is not None]
    return bool(versions) and all(isinstance(v, str) and "." in v for v in versions)


def operation_id(
    *,
    thread_id: str,
    namespace: str,
    turn: str,
    call_key: str,
    args_hash: str,
) -> str:
    """The operation id for one tool call: the one rule every path derives ids with.

    ``turn`` comes from `turn_of`; ``call_key`` tells the calls of one turn
    apart (the ``tool_call_id``, or a Functional API task's
    `call_key`). The ``op_`` prefix keeps a bare
    hex digest from being mistaken for an interrupt id in
    ``Command(resume=...)``, which maps interrupt ids to answers.
    """
    return "op_" + _digest("call", thread_id, namespace, turn, call_key, args_hash)


def edited_operation_id(original_op_id: str, args_hash: str) -> str:
    """The operation an approver's edit creates: derived from the original and the new
    payload, so every re-run of the same edit finds the same operation."""
    return "op_" + _digest("edit", original_op_id, args_hash)


def logical_operation_id(*, tenant: str, provider_key: str) -> str:
    """The operation id of a call with a logical key (``Effect(key=...)``).

    Every call that produces the same logical key in one tenant is the same
    operation, whatever thread or turn it comes from.
    """
    return "op_" + _digest("key", tenant, provider_key)


def default_provider_key(op_id: str) -> str:
    """The provider idempotency key when the tool declares none: opaque, per tenant."""
    return "lge_" + op_id.removeprefix("op_")


def identifying_args(args: Mapping[str, Any], key_argument: str | None = None) -> dict[str, Any]:
    """The arguments an operation's identity is derived from: all but ``key_argument``
    (``Effect(key_argument=...)``), the argument the runtime writes the provider key into.

    The runtime overwrites that argument on every send, so whatever the model put there
    (a model seeing the parameter may invent a different value each time it re-plans)
    must not make the same call look like a new operation.
    """
    if key_argument is None:
        return dict(args)
    return {name: value for name, value in args.items() if name != key_argument}
