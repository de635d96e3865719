"""Checkpointer extensions: the operation ledger lives beside LangGraph's checkpoints.

``AsyncEffectSqliteSaver`` (and ``AsyncEffectPostgresSaver`` with the ``postgres`` extra) is
LangGraph's saver plus a ``.ledger`` in the same database on its own connection;
``EffectSqliteSaver`` / ``EffectPostgresSaver`` (`.sync`) are their sync
twins for ``invoke``/``stream``.
Any other checkpointer can carry a ledger with ``attach_ledger`` (`ledger.attach`).
"""

from __future__ import annotations

__all__: list[str] = []
