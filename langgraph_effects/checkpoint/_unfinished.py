"""Which threads a crash left with unfinished input, read from LangGraph's own tables.

The ledger knows a thread only once a tool call was recorded. A worker that died
between saving the ``__start__`` task's writes (the user's input) and the first
checkpoint after them leaves a thread with no operation at all, and LangGraph's
``get_state`` reports ``next == ()`` for it (measured on 1.2.24): nothing but the
checkpoint tables show that the input was never processed.

A thread is listed when its newest root checkpoint is an ``input`` checkpoint (no
step ran after the input) or has task writes saved against it (a step started, no
checkpoint applied its writes), unless those writes record an interrupt or an error
(the run ended there and its caller was told). Recovery then reads each one's state
and decides (`langgraph_effects.recovery.classify`).

Only the threads in ``effect_open_threads`` are read: triggers on LangGraph's tables
keep there every thread that may be unfinished, in the transaction that saves the
checkpoint or the writes, whoever saves them (so a worker killed mid-step left its
thread there). A root checkpoint saved as a thread's newest adds the thread when it
is an ``input`` checkpoint and removes it otherwise; root task writes on the newest
checkpoint add it (writes a step saves late, on a checkpoint already followed, do not);
deleting the newest checkpoint adds it while the thread has others left (the newest
is now an earlier one, which may be unfinished) and removes it with the last; deleting
older ones (LangGraph's ``prune(strategy="keep_latest")``) changes nothing. A thread
the table lists that is not unfinished (it stopped at an interrupt or on an error) is
read and left out.
"""

from __future__ import annotations

#: Channels whose write means the run stopped there on purpose (an interrupt) or
#: raised to its caller (an error): not a crash. The statements below take them as
#: their parameters.
PARAMS: tuple[str, ...] = ("__interrupt__", "__error__")

#: The threads that may be unfinished (created by the savers' ``setup()``).
OPEN_TABLE = "effect_open_threads"


def unfinished_sql(
    writes_table: str, source: str, mark: str, barrier: str = "", *, every: bool = False
) -> str:
    """The thread ids (one column) of threads whose newest root checkpoint is unfinished,
    among those `OPEN_TABLE` lists (``every``: among all threads, what fills it).

    ``source``: the backend's expression for ``c.metadata``'s ``source``; ``mark``: its
    parameter placeholder (the statement takes the two channels of `PARAMS`);
    ``barrier``: what keeps the backend's planner from merging the newest-checkpoint
    subquery into the filter (Postgres: ``OFFSET 0``; without it Postgres tests every
    checkpoint's metadata, not only each thread's newest). The writes are counted per
    newest checkpoint in the select list, where a planner probes the writes' index for
    each row (an ``EXISTS`` in the filter, Postgres may answer by hashing every write);
    ``CROSS JOIN`` keeps SQLite's planner from reading every checkpoint to find the
    few threads listed when it has no statistics.
    """
    writes = (
        f"SELECT count(*) FROM {writes_table} w WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = '' "
        "AND w.checkpoint_id = c.checkpoint_id"
    )
    if every:
        latest = (
            "SELECT thread_id, max(checkpoint_id) AS checkpoint_id FROM checkpoints "
            "WHERE checkpoint_ns = '' GROUP BY thread_id"
        )
    else:
        latest = (
            "SELECT o.thread_id, (SELECT max(m.checkpoint_id) FROM checkpoints m "
            "WHERE m.thread_id = o.thread_id AND m.checkpoint_ns = '') AS checkpoint_id "
            f"FROM {OPEN_TABLE} o"
        )
    newest = (
        f"SELECT c.thread_id, c.checkpoint_id, {source} AS source, ({writes}) AS written, "
        f"({writes} AND w.channel IN ({mark}, {mark})) AS ended "
        f"FROM ({latest}) latest CROSS JOIN checkpoints c "
        "WHERE c.thread_id = latest.thread_id AND c.checkpoint_ns = '' "
        f"AND c.checkpoint_id = latest.checkpoint_id {barrier}"
    )
    return (
        f"SELECT x.thread_id FROM ({newest}) x "
        "WHERE (x.source = 'input' OR x.written > 0) AND x.ended = 0 "
        "ORDER BY x.checkpoint_id"
    )


def fill_sql(writes_table: str, source: str, mark: str, barrier: str = "") -> str:
    """The statement that fills a new `OPEN_TABLE` with the threads unfinished now (the
    one read of every thread's newest checkpoint, at setup; takes `PARAMS`)."""
    every = unfinished_sql(writes_table, source, mark, barrier, every=True)
    return f"INSERT INTO {OPEN_TABLE} (thread_id) SELECT thread_id FROM ({every}) unfinished"


#: SQLite: the ``source`` of the checkpoint a trigger sees saved (``json_valid`` first:
#: metadata that is not JSON never fails the save).
_SQLITE_SOURCE = (
    "CASE WHEN json_valid(CAST(NEW.metadata AS TEXT)) "
    "THEN json_extract(CAST(NEW.metadata AS TEXT), '$.source') END"
)
_SQLITE_NEWEST = (
    "NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = NEW.thread_id "
    "AND c.checkpoint_ns = '' AND c.checkpoint_id > NEW.checkpoint_id)"
)
_SQLITE_OTHERS = (
    "EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = OLD.thread_id AND c.checkpoint_ns = '')"
)

#: SQLite: `OPEN_TABLE` and its triggers (``IF NOT EXISTS``: run in one transaction
#: with `sqlite_fill`).
SQLITE_SETUP: tuple[str, ...] = (
    f"CREATE TABLE IF NOT EXISTS {OPEN_TABLE} (thread_id TEXT PRIMARY KEY) WITHOUT ROWID",
    "CREATE TRIGGER IF NOT EXISTS effect_open_on_checkpoint AFTER INSERT ON checkpoints "
    f"WHEN NEW.checkpoint_ns = '' AND {_SQLITE_NEWEST} BEGIN "
    f"DELETE FROM {OPEN_TABLE} WHERE thread_id = NEW.thread_id AND {_SQLITE_SOURCE} IS NOT 'input'; "
    f"INSERT OR IGNORE INTO {OPEN_TABLE} (thread_id) "
    f"SELECT NEW.thread_id WHERE {_SQLITE_SOURCE} = 'input'; "
    "END",
    "CREATE TRIGGER IF NOT EXISTS effect_open_on_writes AFTER INSERT ON writes "
    f"WHEN NEW.checkpoint_ns = '' AND {_SQLITE_NEWEST} "
    f"BEGIN INSERT OR IGNORE INTO {OPEN_TABLE} (thread_id) VALUES (NEW.thread_id); END",
    "CREATE TRIGGER IF NOT EXISTS effect_open_on_delete AFTER DELETE ON checkpoints "
    f"WHEN OLD.checkpoint_ns = '' AND {_SQLITE_NEWEST.replace('NEW.', 'OLD.')} BEGIN "
    f"DELETE FROM {OPEN_TABLE} WHERE thread_id = OLD.thread_id AND NOT {_SQLITE_OTHERS}; "
    f"INSERT OR IGNORE INTO {OPEN_TABLE} (thread_id) SELECT OLD.thread_id WHERE {_SQLITE_OTHERS}; "
    "END",
)

#: Postgres: the trigger function's body (``{schema}``: the checkpoints' schema, quoted).
POSTGRES_TRIGGER_BODY = f"""
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.checkpoint_ns = '' AND NOT EXISTS (SELECT 1 FROM {{schema}}.checkpoints c
                WHERE c.thread_id = OLD.thread_id AND c.checkpoint_ns = ''
                AND c.checkpoint_id > OLD.checkpoint_id) THEN
            IF EXISTS (SELECT 1 FROM {{schema}}.checkpoints c
                       WHERE c.thread_id = OLD.thread_id AND c.checkpoint_ns = '') THEN
                INSERT INTO {{schema}}.{OPEN_TABLE} (thread_id) VALUES (OLD.thread_id) ON CONFLICT DO NOTHING;
            ELSE
                DELETE FROM {{schema}}.{OPEN_TABLE} WHERE thread_id = OLD.thread_id;
            END IF;
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.checkpoint_ns <> '' THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM {{schema}}.checkpoints c WHERE c.thread_id = NEW.thread_id
               AND c.checkpoint_ns = '' AND c.checkpoint_id > NEW.checkpoint_id) THEN
        RETURN NULL;  -- not the thread's newest checkpoint
    END IF;
    IF TG_TABLE_NAME = 'checkpoint_writes' THEN
        INSERT INTO {{schema}}.{OPEN_TABLE} (thread_id) VALUES (NEW.thread_id) ON CONFLICT DO NOTHING;
    ELSE
        IF NEW.metadata ->> 'source' = 'input' THEN
            INSERT INTO {{schema}}.{OPEN_TABLE} (thread_id) VALUES (NEW.thread_id) ON CONFLICT DO NOTHING;
        ELSE
            DELETE FROM {{schema}}.{OPEN_TABLE} WHERE thread_id = NEW.thread_id;
        END IF;
    END IF;
    RETURN NULL;
END
"""
