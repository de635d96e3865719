"""Two runners on the same threads, before and after the one-runner rule (scenario
``fencing_race``).

Each thread is started in its own process and SIGKILLed right after its first
effect landed (outcome not recorded). Then a worker resuming every thread and a
``recover()`` of them are released at the same instant, once on LangGraph's plain
saver with the ledger attached (``attach_ledger``: no fencing) and once on
``AsyncEffectSqliteSaver`` / ``AsyncEffectPostgresSaver``. The scripted model words its
follow-up differently on every call, as an LLM does. Counted at the provider's own
records and with ``alist`` (a checkpoint with two children is a fork)::

    python benchmarks/run.py fencing_race --threads 10            # SQLite
    python benchmarks/run.py fencing_race --threads 10 --postgres
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from langgraph_effects.lab.providers import Provider  # noqa: E402
from scenarios import opt, section  # noqa: E402
from tests.helpers.fencing_agent import FenceSpec, open_saver  # noqa: E402
from tests.test_fencing import crash, forks, race, unresolved  # noqa: E402

CONFIGURATIONS = ("plain saver + attach_ledger", "Effect saver (fenced)")
QUICK = ["--threads", "2"]


def _once(db: str, folder: Path, threads: list[str], *, plain: bool) -> dict[str, Any]:
    provider = str(folder / "provider.sqlite")
    crash(FenceSpec(db=db, provider=provider, mode="crash", threads=threads, plain=plain))
    go = folder / "go"
    specs = [
        FenceSpec(db=db, provider=provider, mode=m, threads=threads, go=str(go), plain=plain)
        for m in ("resume", "recover")
    ]
    worker, recovery = race(specs, go)
    counts = Provider(provider, "dedup").count_effects()
    return {
        "effects": sum(counts.values()),
        "intended": 3 * len(threads),
        "follow_ups": sum(n for label, n in counts.items() if label.endswith(":follow")),
        "forked_threads": len({f.split(":")[0] for f in asyncio.run(forks(db, threads))}),
        "unresolved": len(asyncio.run(unresolved(db))),
        "worker": dict(Counter(t["outcome"] for t in worker["threads"].values())),
        "recover": {k: v for k, v in recovery["report"]["counts"].items() if k != "threads"},
    }


def _postgres_db(dsn: str) -> tuple[str, Any]:
    import psycopg
    from psycopg.conninfo import make_conninfo

    schema = f"lge_race_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    db = make_conninfo(dsn, options=f"-c search_path={schema}")

    async def setup() -> None:
        async with open_saver(db) as saver:  # both savers' tables and the ledger
            await saver.setup()

    asyncio.run(setup())

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')

    return db, drop


def options(group: Any) -> None:
    group.add_argument("--threads", type=int, default=10)
    group.add_argument("--postgres", action="store_true", help="on Postgres instead of SQLite")


def _both(count: int, dsn: str | None) -> list[str]:
    threads = [f"t{i}" for i in range(count)]
    lines = []
    for plain in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            if dsn is not None:
                db, drop = _postgres_db(dsn)
            else:
                db, drop = str(folder / "agent.sqlite"), (lambda: None)
            try:
                result = _once(db, folder, threads, plain=plain)
            finally:
                drop()
        name = "plain saver + attach_ledger" if plain else "Effect saver (fenced)     "
        lines.append(f"{name}: {result}")
    return lines


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    postgres = opt(args, "postgres", False)
    if postgres and ctx.pg_skip is not None:
        return section("fencing_race", [f"skipped: {ctx.pg_skip}"])
    # Its helpers run their own event loops: off this one's thread.
    lines = await asyncio.to_thread(_both, opt(args, "threads", 10), ctx.dsn if postgres else None)
    return section("fencing_race", lines)
