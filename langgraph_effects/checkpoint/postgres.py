"""``AsyncEffectPostgresSaver``: LangGraph's ``AsyncPostgresSaver`` plus a ledger in the same
database, and one runner per thread (see `langgraph_effects.checkpoint._fence`)."""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver, Conn
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline, sql
from psycopg.rows import DictRow, dict_row, tuple_row

from .._private import postgres_connection, postgres_saver_cursor
from ..errors import ConfigurationError, ThreadConflictError
from ..ledger.postgres import PostgresLedger
from . import _fence, _sides, _unfinished
from ._fence import Coordinates, Put


class AsyncEffectPostgresSaver(_sides.AsyncOnly, _fence.FencedSaver, AsyncPostgresSaver):
    """An ``AsyncPostgresSaver`` whose database also holds the operation ledger.

    The ledger runs on its own connection pool to the same database: sharing the
    saver's connection is unsafe (a ledger transaction would capture the saver's
    writes, and the saver's autocommit would split ours). Open it with
    [`from_conn_string`][langgraph_effects.AsyncEffectPostgresSaver.from_conn_string] and call
    [`setup`][langgraph_effects.AsyncEffectPostgresSaver.setup] once:

        async with AsyncEffectPostgresSaver.from_conn_string("postgresql://...") as saver:
            await saver.setup()
            graph = builder.compile(checkpointer=saver)
    """

    ledger: PostgresLedger
    sync_name = "EffectPostgresSaver"

    def __init__(
        self,
        conn: Conn,
        ledger: PostgresLedger,
        pipe: AsyncPipeline | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(conn, pipe=pipe, serde=serde)
        if ledger.pool is conn:
            raise ValueError("the ledger must have its own pool, not the checkpointer's connection")
        self.ledger = ledger
        self._written = _fence.Written()
        self._fence_ready = False  # the fence's triggers were seen by this saver
        self._session_fenced = False  # its connection's session asked them to fence it
        self._recognises_own = False  # their function knows the session's own late results

    @classmethod
    def from_conn_string(  # type: ignore[override]  # async with as before; a sync with is refused
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        serde: SerializerProtocol | None = None,
        ledger_schema: str | None = None,
        ledger_max_size: int = 10,
        connect_timeout: float | None = None,
    ) -> _sides.AsyncOpener[AsyncEffectPostgresSaver]:
        """Open the checkpoints and the ledger in the Postgres database ``conn_string``
        (``async with``; sync code opens ``EffectPostgresSaver`` instead).

        The checkpoints use one connection (as ``AsyncPostgresSaver`` does), the
        ledger its own pool of up to ``ledger_max_size`` connections, in
        ``ledger_schema`` if given (else the connection's ``search_path``).
        ``connect_timeout`` (seconds) bounds every connection attempt.
        """
        opening = cls._open(
            conn_string, pipeline=pipeline, serde=serde, ledger_schema=ledger_schema,
            ledger_max_size=ledger_max_size, connect_timeout=connect_timeout,
        )
        return _sides.AsyncOpener(opening, cls.__name__, cls.sync_name)

    @classmethod
    @asynccontextmanager
    async def _open(
        cls,
        conn_string: str,
        *,
        pipeline: bool,
        serde: SerializerProtocol | None,
        ledger_schema: str | None,
        ledger_max_size: int,
        connect_timeout: float | None,
    ) -> AsyncIterator[AsyncEffectPostgresSaver]:
        extra: dict[str, Any] = {}
        ledger_timeout: dict[str, Any] = {}
        if connect_timeout is not None:
            extra["connect_timeout"] = max(2, round(connect_timeout))
            ledger_timeout = {"timeout": connect_timeout, "connect_timeout": connect_timeout}
        async with (
            PostgresLedger.from_conn_string(
                conn_string, schema=ledger_schema, max_size=ledger_max_size, **ledger_timeout
            ) as ledger,
            # The same connection settings AsyncPostgresSaver.from_conn_string uses.
            await AsyncConnection.connect(
                conn_string, autocommit=True, prepare_threshold=0, row_factory=dict_row, **extra
            ) as conn,
        ):
            if pipeline:
                async with conn.pipeline() as pipe:
                    yield cls(conn, ledger, pipe=pipe, serde=serde)
            else:
                yield cls(conn, ledger, serde=serde)

    async def setup(self) -> None:
        """Create or migrate both the checkpoint tables and the ledger tables.

        Safe from many processes at once (a deploy starting its workers together):
        LangGraph's own migrations take no lock, so concurrent first setups collide on
        ``CREATE TABLE`` (``UniqueViolation``); here they run under a session advisory
        lock, one process after the other, and the later ones find nothing to do.
        """
        await self.ledger.setup()
        async with self.ledger.migration_lock("checkpoints"):
            await super().setup()
        await self.setup_fencing()
        await self._setup_open_threads()
        self._setup_seen = True

    async def _has_checkpoint_tables(self) -> bool:
        async with postgres_connection(self.conn) as conn:
            found = await _value(
                conn,
                "SELECT to_regclass('checkpoints') IS NOT NULL "
                "AND to_regclass('checkpoint_writes') IS NOT NULL",
            )
        return bool(found)

    async def setup_fencing(self) -> None:
        """Create what the one-runner-per-thread rule needs (idempotent), in the schema
        of LangGraph's ``checkpoints`` table: the index it probes, the function that
        checks, and the triggers on ``checkpoints`` and ``checkpoint_writes`` that call it.

        Run after LangGraph's migrations. Serialised by an advisory lock (concurrent
        ``CREATE INDEX IF NOT EXISTS`` or ``CREATE OR REPLACE FUNCTION`` can fail); what
        is already as this version defines it is left alone, so a role that does not own
        it (it was set up by another) can still run setup.
        """
        async with postgres_connection(self.conn) as conn, conn.transaction():
            await conn.execute(_SETUP_LOCK_SQL)
            await conn.execute(_fence.INDEX_SQL)
            schema = await self._checkpoints_schema(conn)
            for name, body, create in _functions(schema):
                if await _value(conn, _FUNCTION_BODY_SQL, name, schema) != body:
                    await conn.execute(create)
            for table in _FENCED_TABLES:
                if await _value(conn, _TRIGGER_FOUND_SQL, _TRIGGER, schema, table) is None:
                    await conn.execute(_trigger_sql(schema, table))

    async def _setup_open_threads(self) -> None:
        """Create `_unfinished.OPEN_TABLE` beside LangGraph's tables, its trigger function
        and triggers, and fill it (idempotent; the fill runs with the table's creation,
        after the triggers, whose creation waits for the saves in flight and holds off
        new ones until the fill commits)."""
        async with postgres_connection(self.conn) as conn, conn.transaction():
            await conn.execute(_SETUP_LOCK_SQL)
            schema = await self._checkpoints_schema(conn)
            function = sql.Identifier(schema, _OPEN_FUNCTION)
            table = sql.Identifier(schema, _unfinished.OPEN_TABLE)
            quoted = sql.Identifier(schema).as_string(None)
            body = _unfinished.POSTGRES_TRIGGER_BODY.replace("{schema}", quoted)
            if await _value(conn, _FUNCTION_BODY_SQL, _OPEN_FUNCTION, schema) != body:
                create = "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS {}"
                await conn.execute(sql.SQL(create).format(function, sql.Literal(body)))
            created = await _value(conn, "SELECT to_regclass(%s) IS NULL", table.as_string(None))
            if created:
                await conn.execute(sql.SQL("CREATE TABLE {} (thread_id text PRIMARY KEY)").format(table))
            for saved in _FENCED_TABLES:
                if await _value(conn, _TRIGGER_FOUND_SQL, _OPEN_TRIGGER, schema, saved) is None:
                    events = "INSERT OR UPDATE OR DELETE" if saved == "checkpoints" else "INSERT OR UPDATE"
                    trigger = f"CREATE TRIGGER {{}} AFTER {events} ON {{}} "
                    trigger += " FOR EACH ROW EXECUTE FUNCTION {}()"
                    await conn.execute(
                        sql.SQL(trigger).format(
                            sql.Identifier(_OPEN_TRIGGER), sql.Identifier(schema, saved), function
                        )
                    )
            if created:
                await conn.execute(
                    _unfinished.fill_sql("checkpoint_writes", "c.metadata ->> 'source'", "%s", "OFFSET 0"),
                    _unfinished.PARAMS,
                )

    @staticmethod
    async def _checkpoints_schema(conn: AsyncConnection[Any]) -> str:
        schema = await _value(
            conn,
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass('checkpoints')",
        )
        if schema is None:
            raise ConfigurationError("no checkpoints table on the search_path: run LangGraph's setup() first")
        return str(schema)

    async def unfinished_threads(self) -> list[str]:
        """Threads whose newest checkpoint has input or a step no checkpoint finished
        (see `_unfinished`), oldest first."""
        query = _unfinished.unfinished_sql(
            "checkpoint_writes", "c.metadata ->> 'source'", "%s", "OFFSET 0"
        )
        async with self._cursor() as cur:
            await cur.execute(query, _unfinished.PARAMS)
            return [str(row["thread_id"]) for row in await cur.fetchall()]

    async def _check_fence(self) -> None:
        """Once per saver, in one query: the fence's triggers are there (else saves
        would go unfenced), and on a connection of its own the saver's session asks them
        to fence it (on a pool, each save asks in its own transaction instead)."""
        if self._fence_ready:
            return
        own_session = isinstance(self.conn, AsyncConnection)
        async with self.lock, postgres_connection(self.conn) as conn:
            cur = conn.cursor(row_factory=tuple_row)
            params = {"mode": "on" if own_session else None, "trigger": _TRIGGER}
            await cur.execute(_TRIGGERS_ENABLED_SQL, params)
            enabled, _, current = await cur.fetchone() or (0, None, 0)
            if self.pipe is not None:
                await self.pipe.sync()  # commit the session's mode now, not with the next save
        if enabled != len(_FENCED_TABLES):
            raise ConfigurationError(
                "the checkpoint database has no one-runner-per-thread triggers yet: run the "
                "saver's setup() (or `langgraph-effects --db DSN setup`) once after upgrading"
            )
        self._fence_ready = True
        self._session_fenced = own_session
        self._recognises_own = own_session and bool(current)

    def _cursor(  # type: ignore[override]  # LangGraph annotates its generator-based context
        self, *, pipeline: bool = False
    ) -> AbstractAsyncContextManager[AsyncCursor[DictRow]]:
        """LangGraph's cursor. Inside a save, where the trigger must be told how to fence
        it, the first statement tells it (in the same transaction as LangGraph's
        statements): on a pool, and for task results on a checkpoint this saver has
        already moved past (its own late ones).

        Decided here, under the saver's lock, not when ``aput_writes`` is called: the
        child's save may take the lock first (LangGraph serialises the writes in a
        thread before it asks for the lock), and ``aput`` records the child before it
        next yields to the event loop.
        """
        return _FencedCursor(self, postgres_saver_cursor(super(), pipeline=pipeline))

    async def _tell_fence(self, cur: AsyncCursor[DictRow], saving: Coordinates) -> None:
        """The statement that tells the trigger how to fence this save, when one is needed.

        On its own session the trigger remembers the parent of the last checkpoint
        that session saved under the rule, and takes task results on that parent for
        the session's own late ones (the lock only) by itself: the saver sends nothing
        when it agrees, and clears the trigger's memory in the one case it does not
        (another saver on the same connection moved past that checkpoint).
        """
        checkpoint_id = saving[2]
        if _BRANCHING.get():
            mode = "branch"
        else:
            mode = "own-late" if checkpoint_id and self._written.has_child(checkpoint_id) else "on"
        if self._session_fenced and checkpoint_id and _LAST_SAVED.get(self.conn) == saving:
            if mode == "own-late" and self._recognises_own:
                return  # the trigger takes them as this session's own late results
            if mode == "on":  # (also while setup() may replace an earlier trigger function)
                await cur.execute(_FORGET_SAVED_SQL)
                forgetting = _FORGETTING.get()
                if forgetting is not None:
                    forgetting.append(saving)  # forgotten here too once this commits
        if mode != "on" or not self._session_fenced:
            await cur.execute(_FENCE_MODE_SQL, (mode,))

    def _raise_refusal(
        self, error: psycopg.Error, thread_id: str, ns: str, parent: str | None, what: str
    ) -> None:
        """Inside ``except`` around LangGraph's statements: the trigger's refusal raised
        as ours (and the missing fence function as a configuration error); any other
        error returns, for the caller to re-raise as it is."""
        if error.sqlstate == _REFUSED:
            refused = ThreadConflictError(thread_id, ns, parent, error.diag.message_detail, what=what)
            _fence.on_refused(refused)
            raise refused from None
        if error.sqlstate == "42883" and _FENCE_FUNCTION in str(error):
            self._fence_ready = False
            raise ConfigurationError(
                "the checkpoint database has no one-runner-per-thread function: run the "
                "saver's setup() (or `langgraph-effects --db DSN setup`) once after upgrading"
            ) from error

    @contextmanager
    def _saving(
        self, saving: Coordinates, parent: str | None, check: bool, what: str
    ) -> Iterator[list[Coordinates]]:
        """Around LangGraph's statements of one save: `_cursor` tells the trigger how
        to fence it (``saving``, ``check``: `_SAVING`, `_BRANCHING`), the trigger's
        refusal of a child of ``parent`` is raised as ours (`_raise_refusal`), and what
        the save's transaction tells the trigger to forget is collected in the list
        yielded (`_FORGETTING`: only task results ever are)."""
        thread_id, ns, _ = saving
        forgotten: list[Coordinates] = []
        saving_token = _SAVING.set(saving)
        branching_token = _BRANCHING.set(not check)
        forgetting_token = _FORGETTING.set(forgotten)
        try:
            yield forgotten
        except psycopg.Error as error:
            self._raise_refusal(error, thread_id, ns, parent, what)
            raise
        finally:
            _SAVING.reset(saving_token)
            _BRANCHING.reset(branching_token)
            _FORGETTING.reset(forgetting_token)

    async def _put_fenced(self, put: Put) -> RunnableConfig:
        await self._check_fence()
        thread_id, ns, parent = _fence.coordinates(put.config)
        with self._saving((thread_id, ns, ""), parent, put.check, "checkpoint"):
            saved: RunnableConfig = await AsyncPostgresSaver.aput(
                self, put.config, put.checkpoint, put.metadata, put.new_versions
            )
        if put.check and self._session_fenced:
            # Committed under the rule on this session: what its trigger now remembers.
            _LAST_SAVED[self.conn] = (thread_id, ns, parent or "")
        return saved

    async def _put_writes_fenced(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str,
        check: bool,
    ) -> None:
        await self._check_fence()
        thread_id, ns, checkpoint_id = _fence.coordinates(config)
        saving = (thread_id, ns, str(checkpoint_id or ""))
        with self._saving(saving, checkpoint_id, check, "task results") as forgotten:
            await AsyncPostgresSaver.aput_writes(self, config, writes, task_id, task_path)
        if forgotten and _LAST_SAVED.get(self.conn) == forgotten[-1]:
            del _LAST_SAVED[self.conn]

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints the given runs saved (their metadata ``run_id``) and
        the task results stored on them: what LangGraph's server asks of its
        checkpointer when a run is rolled back (``multitask_strategy="rollback"``).
        The channel values' blobs are shared by version and stay."""
        ids = [str(r) for r in run_ids]
        if not ids:
            return
        async with self.lock, postgres_connection(self.conn) as conn, conn.transaction():
            await conn.execute(_DELETE_RUN_WRITES_SQL, (ids,))
            await conn.execute(_DELETE_RUN_CHECKPOINTS_SQL, (ids,))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune the threads' checkpoints: LangGraph's ``AsyncPostgresSaver.aprune``.

        ``"keep_latest"`` keeps the latest checkpoint of each namespace, with its
        pending writes (a thread a crash left mid-step still resumes from it);
        ``"delete"`` removes every checkpoint, write and blob of the threads.

        The ledger is not touched. An operation of a pruned thread stays as it was:
        ``langgraph-effects list`` still lists an unresolved one, and recovery still
        reports it (after ``"delete"`` as ``not_resumable``: the thread has no
        checkpoint left, so an operator decides it with ``langgraph-effects resolve``).
        """
        await super().aprune(thread_ids, strategy=strategy)

    async def _has_child(self, thread_id: str, ns: str, parent: str | None) -> bool:
        query = _fence.children_sql(parent, "%s")
        params = _fence.children_params(thread_id, ns, parent, "")
        async with self._cursor() as cur:
            await cur.execute(query, params)
            return await cur.fetchone() is not None


class _FencedCursor:
    """``AsyncEffectPostgresSaver._cursor``'s context: LangGraph's cursor, and inside a save
    the statement that tells the trigger how to fence it, before LangGraph's own."""

    __slots__ = ("_inner", "_saver")

    def __init__(
        self, saver: AsyncEffectPostgresSaver, inner: AbstractAsyncContextManager[AsyncCursor[DictRow]]
    ) -> None:
        self._saver, self._inner = saver, inner

    async def __aenter__(self) -> AsyncCursor[DictRow]:
        cur = await self._inner.__aenter__()
        saving = _SAVING.get()
        if saving is not None:
            try:
                await self._saver._tell_fence(cur, saving)
            except BaseException as error:
                await self._inner.__aexit__(type(error), error, error.__traceback__)
                raise
        return cur

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._inner.__aexit__(*exc)


_DELETE_RUN_WRITES_SQL = (
    "DELETE FROM checkpoint_writes w USING checkpoints c WHERE c.metadata ->> 'run_id' = ANY(%s) "
    "AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns "
    "AND w.checkpoint_id = c.checkpoint_id"
)
_DELETE_RUN_CHECKPOINTS_SQL = "DELETE FROM checkpoints WHERE metadata ->> 'run_id' = ANY(%s)"

# -- the fence in the database (created by setup_fencing) ----------------------------------
#
# Every row LangGraph inserts into ``checkpoints`` or ``checkpoint_writes`` passes a
# trigger that takes the thread and namespace's advisory lock (held until the
# transaction ends: the check and the insert are atomic for every runner of the
# thread) and refuses a fork. It runs inside LangGraph's own statements, so a save
# runs no statement beyond LangGraph's own.

_FENCE_FUNCTION = "effect_checkpoint_fence"
#: What keeps `_unfinished.OPEN_TABLE` (see `_unfinished.POSTGRES_TRIGGER_BODY`).
_OPEN_FUNCTION = "effect_open_threads_row"
_OPEN_TRIGGER = "effect_open_threads"
_TRIGGER_FUNCTION = "effect_checkpoint_fence_row"
_TRIGGER = "effect_one_runner_per_thread"
_FENCED_TABLES = ("checkpoints", "checkpoint_writes")
#: The SQLSTATE the check raises when a save would fork the thread (DETAIL: the child's id).
_REFUSED = "LGE01"
#: How the trigger fences a session's inserts: ``on`` (the rule), ``own-late`` (task
#: results on a checkpoint this saver moved past itself: the lock only), ``branch`` (a
#: save that branches on purpose, see ``_fence.branching``: the lock only), unset (not a
#: fenced saver's: left alone, as LangGraph's own saver sharing the tables). Set for a
#: saver's own connection once, for one transaction otherwise.
_FENCE_MODE = "langgraph_effects.fence"
_FENCE_MODE_SQL = f"SELECT set_config('{_FENCE_MODE}', %s, true)"
#: Inside a fenced save: (thread, namespace, "") for a checkpoint, else (thread,
#: namespace, the checkpoint whose task results the current ``aput_writes`` stores).
_SAVING: ContextVar[Coordinates | None] = ContextVar("langgraph_effects_saving", default=None)
#: The session setting where the trigger remembers (thread, namespace, parent) of the
#: last checkpoint its session saved under the rule, and the session's own setting
#: that asks it to (a connection of a saver's own, never a pooled one).
_SAVED = "langgraph_effects.fence_saved"
_SESSION = "langgraph_effects.fence_session"
_FORGET_SAVED_SQL = f"SELECT set_config('{_SAVED}', '', false)"
#: Per checkpoint connection: what its session's trigger remembers (see ``_SAVED``).
#: Changed only once the transaction that changes the trigger's memory has committed.
_LAST_SAVED: weakref.WeakKeyDictionary[Any, Coordinates] = weakref.WeakKeyDictionary()
#: Inside a fenced save (``_saving``): what its transaction tells the trigger to forget
#: (only a save of task results ever does, see ``_tell_fence``).
_FORGETTING: ContextVar[list[Coordinates] | None] = ContextVar("langgraph_effects_forgetting", default=None)
#: Inside a fenced save: it branches on purpose (the trigger only takes the lock).
_BRANCHING: ContextVar[bool] = ContextVar("langgraph_effects_branching", default=False)

# The check, by (what, parent, own id): 'checkpoint' refuses a child of p_parent other
# than p_own; 'writes' refuses any child of the checkpoint the writes are for; 'lock'
# only takes the lock. Its signature is the one earlier versions called directly.
_FENCE_BODY = """
DECLARE
    child text;
BEGIN
    -- Held until the caller's transaction ends: the check and the caller's own
    -- statements that follow it are atomic for every runner of this thread.
    PERFORM pg_advisory_xact_lock(hashtextextended(p_lock_key, 0));
    IF p_what = 'lock' THEN
        RETURN;
    ELSIF p_parent IS NULL THEN
        SELECT c.checkpoint_id INTO child FROM checkpoints c
         WHERE c.thread_id = p_thread AND c.checkpoint_ns = p_ns
           AND c.parent_checkpoint_id IS NULL AND c.checkpoint_id <> p_own LIMIT 1;
    ELSE
        SELECT c.checkpoint_id INTO child FROM checkpoints c
         WHERE c.thread_id = p_thread AND c.checkpoint_ns = p_ns
           AND c.parent_checkpoint_id = p_parent AND c.checkpoint_id <> p_own LIMIT 1;
    END IF;
    IF child IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LGE01', DETAIL = child, MESSAGE = format(
            'langgraph-effects: %s refused, thread %L (namespace %L) already moved on from %s to %s',
            p_what, p_thread, p_ns, coalesce(p_parent, 'its start'), child);
    END IF;
END
"""
# The trigger does the check itself, as _FENCE_BODY does (kept for the triggers of
# earlier versions during an upgrade): a PL/pgSQL call per row inserted was about as
# dear as the check (pg_stat_user_functions, benchmarks/pg_profile.py), and the lock
# key is built only for a fenced session's rows.
_TRIGGER_BODY = f"""
DECLARE
    mode text := current_setting('{_FENCE_MODE}', true);
    parent text;
    own text := '';
    child text;
    place text;
BEGIN
    IF mode IS NULL OR mode NOT IN ('on', 'own-late', 'branch') THEN
        RETURN NEW;  -- not a fenced saver's insert
    END IF;
    -- Held until the transaction ends: the check and the insert are atomic for every
    -- runner of this thread. The key earlier versions hashed in Python (one lock
    -- during an upgrade).
    place := 'langgraph-effects/fence' || chr(31) || NEW.thread_id || chr(31) || NEW.checkpoint_ns;
    PERFORM pg_advisory_xact_lock(hashtextextended(place, 0));
    IF mode <> 'on' THEN
        RETURN NEW;  -- a branch on purpose, or this saver's own late task results: the lock only
    ELSIF TG_TABLE_NAME = 'checkpoints' THEN
        parent := NEW.parent_checkpoint_id;  -- refuse a second child of the parent
        own := NEW.checkpoint_id;
    ELSIF current_setting('{_SAVED}', true) = place || chr(31) || NEW.checkpoint_id THEN
        RETURN NEW;  -- this session's last save moved past it: its own late results, the lock only
    ELSE
        parent := NEW.checkpoint_id;  -- refuse task results on a checkpoint moved past
    END IF;
    IF parent IS NULL THEN
        SELECT c.checkpoint_id INTO child FROM {{schema}}.checkpoints c
         WHERE c.thread_id = NEW.thread_id AND c.checkpoint_ns = NEW.checkpoint_ns
           AND c.parent_checkpoint_id IS NULL AND c.checkpoint_id <> own LIMIT 1;
    ELSE
        SELECT c.checkpoint_id INTO child FROM {{schema}}.checkpoints c
         WHERE c.thread_id = NEW.thread_id AND c.checkpoint_ns = NEW.checkpoint_ns
           AND c.parent_checkpoint_id = parent AND c.checkpoint_id <> own LIMIT 1;
    END IF;
    IF child IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '{_REFUSED}', DETAIL = child, MESSAGE = format(
            'langgraph-effects: %s refused, thread %L (namespace %L) already moved on from %s to %s',
            CASE WHEN TG_TABLE_NAME = 'checkpoints' THEN 'checkpoint' ELSE 'writes' END,
            NEW.thread_id, NEW.checkpoint_ns, coalesce(parent, 'its start'), child);
    END IF;
    IF TG_TABLE_NAME = 'checkpoints' AND current_setting('{_SESSION}', true) = 'on' THEN
        -- Undone if this transaction rolls back; read by this session's next saves.
        PERFORM set_config('{_SAVED}', place || chr(31) || coalesce(parent, ''), false);
    END IF;
    RETURN NEW;
END
"""
_FENCE_PARAMETERS = "p_lock_key text, p_what text, p_thread text, p_ns text, p_parent text, p_own text"
#: Taken by every setup transaction of the triggers and their functions (the fence's
#: and `_unfinished.OPEN_TABLE`'s): one at a time, until the transaction ends.
_SETUP_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended('langgraph-effects/fence-setup', 0))"
_FUNCTION_BODY_SQL = (
    "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
    "WHERE p.proname = %s AND n.nspname = %s"
)
_TRIGGER_FOUND_SQL = (
    "SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.tgname = %s AND n.nspname = %s AND c.relname = %s"
)
#: The fence's triggers enabled on LangGraph's tables; sets the session's mode (and
#: asks the trigger to remember its saves) unless NULL; whether the trigger's function
#: is one that can (a database set up by an earlier version until setup runs again).
_TRIGGERS_ENABLED_SQL = (
    f"SELECT count(*), set_config('{_FENCE_MODE}', "
    f"coalesce(%(mode)s, current_setting('{_FENCE_MODE}', true), ''), false) "
    f"|| set_config('{_SESSION}', coalesce(%(mode)s, current_setting('{_SESSION}', true), ''), false), "
    f"(SELECT count(*) FROM pg_proc WHERE proname = '{_TRIGGER_FUNCTION}' "
    f"AND strpos(prosrc, '{_SAVED}') > 0 AND pronamespace = "
    "(SELECT relnamespace FROM pg_class WHERE oid = to_regclass('checkpoints'))) "
    "FROM pg_trigger WHERE tgname = %(trigger)s AND tgenabled <> 'D' AND tgrelid IN ("
    + ", ".join(f"to_regclass('{table}')" for table in _FENCED_TABLES)
    + ")"
)


async def _value(conn: AsyncConnection[Any], query: str, *params: Any) -> Any:
    """The first column of the first row ``query`` returns, or ``None``."""
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(query, params)
    row = await cur.fetchone()
    return None if row is None else row[0]


def _functions(schema: str) -> list[tuple[str, str, sql.Composed]]:
    """(name, body, statement that creates it) of the fence's functions in ``schema``."""
    trigger_body = _TRIGGER_BODY.replace("{schema}", sql.Identifier(schema).as_string(None))
    create = "CREATE OR REPLACE FUNCTION {}.{}(%s) RETURNS %s LANGUAGE plpgsql AS {}"
    return [
        (_FENCE_FUNCTION, _FENCE_BODY, sql.SQL(create % (_FENCE_PARAMETERS, "void")).format(
            sql.Identifier(schema), sql.Identifier(_FENCE_FUNCTION), sql.Literal(_FENCE_BODY))),
        (_TRIGGER_FUNCTION, trigger_body, sql.SQL(create % ("", "trigger")).format(
            sql.Identifier(schema), sql.Identifier(_TRIGGER_FUNCTION), sql.Literal(trigger_body))),
    ]


def _trigger_sql(schema: str, table: str) -> sql.Composed:
    return sql.SQL("CREATE TRIGGER {} BEFORE INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()").format(
        sql.Identifier(_TRIGGER), sql.Identifier(schema, table), sql.Identifier(schema, _TRIGGER_FUNCTION)
    )


__all__ = ["AsyncEffectPostgresSaver"]
