"""Memory and disk per 10,000 recorded operations (scenario ``memory``): ``tracemalloc``
around an ``InMemoryLedger``, and the growth of a SQLite ledger file (see ``scan.py``)."""

from __future__ import annotations

from typing import Any

from scenarios.scan import disk_sqlite, memory_inmemory

CONFIGURATIONS = ("inmemory", "sqlite_file")


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    ops = 2_000 if ctx.quick else 10_000
    ctx.log(f"memory and disk per {ops:,} operations")
    return {
        "memory": {
            "inmemory": await memory_inmemory(ops),
            "sqlite_file": await disk_sqlite(ctx.workdir / "disk.sqlite", ops),
        }
    }
