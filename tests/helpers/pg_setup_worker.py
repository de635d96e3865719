"""One worker of the concurrent-setup test: connect, wait for the others, then ``setup()``.

Usage: ``python -m tests.helpers.pg_setup_worker DSN BARRIER_DIR NAME [plain]``. Every
worker connects first, then writes ``BARRIER_DIR/NAME.ready`` and waits for
``BARRIER_DIR/go``, so all of them call ``setup()`` at the same moment. ``plain`` uses
LangGraph's own ``AsyncPostgresSaver`` (no lock) instead of ``AsyncEffectPostgresSaver``.
Prints ``ok`` or the exception, and exits 0 or 1.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any


async def main(dsn: str, barrier: Path, name: str, plain: bool) -> int:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver

    opener: Any = AsyncPostgresSaver if plain else AsyncEffectPostgresSaver
    async with opener.from_conn_string(dsn) as saver:
        (barrier / f"{name}.ready").touch()
        deadline = time.monotonic() + 120
        while not (barrier / "go").exists():
            if time.monotonic() > deadline:
                print("no go signal", flush=True)
                return 1
            await asyncio.sleep(0.005)
        try:
            await saver.setup()
        except Exception as error:
            print(f"{type(error).__module__}.{type(error).__name__}: {error}", flush=True)
            return 1
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], "plain" in sys.argv[4:])))
