"""The dispatch lease's lock-file work stays off the event loop.

``langgraph dev`` fails a run whose code makes a blocking call on the event loop
(blockbuster); ``tests/test_langgraph_server.py`` caught the lease's ``flock`` files
doing so (``tempfile.gettempdir`` -> ``os.getcwd``, ``mkdir``, ``open``, ``rename``,
``unlink``). The same detector, without a server: the async entry points pass
under it, the blocking ones are caught by it (so the check has teeth), and
same-host liveness is still proved by the lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from blockbuster import BlockBuster, BlockingError, blockbuster_ctx

from langgraph_effects._runtime import lease
from langgraph_effects.core.operation import Owner


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LANGGRAPH_EFFECTS_RUNTIME_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


@pytest.fixture
def detector() -> Iterator[BlockBuster]:
    with blockbuster_ctx() as bb:
        yield bb


async def _over(owner: Owner) -> None:
    """Until the lock file says the dispatch is over, as a prober in another process
    reads it (the file is removed on a worker thread a moment after the release)."""
    assert owner.lock is not None
    for _ in range(500):
        if await asyncio.to_thread(lease._probe, owner.lock, owner.token) is False:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{owner.lock} still stands for {owner.token}")


async def test_lease_entry_points_do_not_block_the_loop(runtime_dir: Path, detector: BlockBuster) -> None:
    owner = await lease.new_owner_async()
    assert owner.lock is not None and Path(owner.lock).parent == runtime_dir
    assert await lease.owner_alive_async(owner) is True  # held by our flock

    lease.release_soon(owner)
    assert not lease.holds(owner)  # forgotten at once
    await _over(owner)
    assert await lease.owner_alive_async(owner) is False  # the dispatch is provably over


async def test_the_blocking_call_is_caught(runtime_dir: Path, detector: BlockBuster) -> None:
    """The check has teeth: the synchronous entry point fails under the detector, as
    it did in ``langgraph dev`` (``os.open`` and ``flock`` themselves are not on the
    detector's list, so ``owner_alive`` cannot be caught this way; it moved anyway)."""
    with pytest.raises(BlockingError):
        lease.new_owner()
    assert not await asyncio.to_thread(lambda: list(runtime_dir.glob("*.lock")))  # nothing made


async def test_the_default_lock_directory_is_found_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, detector: BlockBuster
) -> None:
    """With no directory named, the lock files go under ``tempfile.gettempdir()``,
    whose first call probes the file system (``os.getcwd`` among others). An owner made
    ahead is matched to the settings without that call, so the first dispatch of a
    process under ``langgraph dev`` does not fail with ``BlockingError``."""
    monkeypatch.delenv("LANGGRAPH_EFFECTS_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # as in a process that never asked
    owner = await lease.new_owner_async()
    assert owner.lock is not None and Path(owner.lock).parent.parent == tmp_path
    lease.release_soon(owner)
    await _over(owner)
