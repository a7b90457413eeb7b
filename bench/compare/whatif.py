"""What the proposed engine changes would buy, measured before anyone writes them:
the store's calls against one-statement prototypes that write the same rows.

    python -m bench profile what-if

1. A checkpoint commit (run update + checkpoint row + checkpoint event): the general
   ORM path was BEGIN, UPDATE, SELECT, INSERT, INSERT, COMMIT; prototype: one
   statement of data-modifying CTEs. runs/storage/pg.py now commits checkpoints so.
2. Claim + load on resume: they were UPDATE + SELECT (claim) and three SELECTs (load);
   prototype: one statement (UPDATE ... RETURNING, latest checkpoint, effects after it).
   runs/storage/pg.py now claims so (with the plan fixes its comments explain); the
   store's load() is still three SELECTs.

3. An effect's commit, server side: the store's statement (a new call's effect row is a
   plain INSERT) against the same statement without its event row, with the upsert an
   outcome after its intent takes, and the floor (issue 32's no-op row: what each part
   costs).

1 and 2 are implemented now: "today" below is the store as it is, so the ratios only
show what is left. bench/results/profile.txt keeps the figures from before.
Blocks of the two variants alternate; medians are printed.
"""

from __future__ import annotations

import json
import statistics
import time
from datetime import UTC, datetime, timedelta

CHECKPOINT_SQL = """
WITH run AS (
    UPDATE runs_run SET event_seq = event_seq + 1, checkpoint_count = checkpoint_count + 1,
           step_no = %s, lease_expires_at = %s, updated_at = %s
    WHERE id = %s AND epoch = %s
    RETURNING event_seq, checkpoint_count, control, epoch),
cp AS (
    INSERT INTO runs_checkpoint (run_id, number, branch, step_no, codec, blob, size, reason,
                                 parent_number, base_number, created_at)
    SELECT %s, run.checkpoint_count, %s, %s, %s, %s, %s, 'step', NULL, NULL, %s FROM run),
ev AS (
    INSERT INTO runs_runevent (run_id, seq, kind, data, created_at)
    SELECT %s, run.event_seq, 'checkpoint',
           jsonb_build_object('number', run.checkpoint_count, 'branch', %s::int,
                              'step', %s::int, 'size', %s::int, 'reason', 'step'), %s
    FROM run)
SELECT epoch, event_seq, control, checkpoint_count FROM run"""

CLAIM_LOAD_SQL = """
WITH claimed AS (
    UPDATE runs_run SET epoch = epoch + 1, lease_owner = %s, lease_expires_at = %s,
           claimed_after_crash = (lease_owner IS NOT NULL), enqueued_at = NULL, updated_at = %s
    WHERE id = %s AND status IN ('queued', 'running')
      AND (lease_owner IS NULL OR lease_expires_at <= %s)
    RETURNING *),
cp AS (
    SELECT c.number, c.step_no, c.codec, c.blob FROM runs_checkpoint c, claimed
    WHERE c.run_id = claimed.id AND c.branch = claimed.branch
    ORDER BY c.step_no DESC, c.number DESC LIMIT 1)
SELECT claimed.epoch, claimed.step_no, cp.number, cp.blob,
       (SELECT coalesce(jsonb_agg(to_jsonb(e) ORDER BY e.step_no, e.seq), '[]')
        FROM runs_effect e WHERE e.run_id = claimed.id AND e.branch = claimed.branch
          AND e.step_no > coalesce(cp.step_no, 0) AND NOT e.superseded)
FROM claimed LEFT JOIN cp ON true"""


def _alternate(a, b, rounds: int = 6, per_round: int = 100) -> tuple[float, float]:
    """Medians of per-call seconds; a function may return the seconds of the part that
    counts (set-up excluded), else the whole call is timed."""
    times_a, times_b = [], []
    for _ in range(rounds):
        for fn, out in ((a, times_a), (b, times_b)):
            for _ in range(per_round):
                start = time.perf_counter()
                measured = fn()
                out.append(measured if measured is not None else time.perf_counter() - start)
    return statistics.median(times_a), statistics.median(times_b)


def checkpoint_commit() -> None:
    import psycopg
    from django.db import connection

    from runs.durable import control, serde
    from runs.durable import records as r
    from runs.storage import database_store

    store = database_store()
    run = control.launch(store, agent="bench-steps", inputs={"n": 1})
    claim = store.claim(run.id, "bench:0:whatif", 600, time.time())
    epoch, step = claim.run.epoch, [0]
    blob, codec = serde.encode_state({"i": 1, "n": 2, "pad": "x" * 200})

    def today():
        step[0] += 1
        cp = r.CheckpointRecord(number=0, branch=1, step_no=step[0], blob=blob, codec=codec,
                                created_at=time.time())
        store.commit(run.id, epoch, r.Commit(run=r.RunChanges(step_no=step[0],
                                                              lease_expires_at=time.time() + 60),
                                             checkpoint=cp))

    def one_statement():
        step[0] += 1
        now = datetime.now(UTC)
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(CHECKPOINT_SQL, [
                step[0], now + timedelta(seconds=60), now, run.id, epoch, run.id, 1, step[0],
                codec, blob, len(blob), now, run.id, 1, step[0], len(blob), now], prepare=True)
            assert cursor.fetchone() is not None

    connection.ensure_connection()
    a, b = _alternate(today, one_statement)
    print(f"checkpoint commit: today {a * 1e3:.3f} ms, one statement {b * 1e3:.3f} ms "
          f"({a / b:.1f}x faster)")


def claim_and_load() -> None:
    import psycopg
    from django.db import connection

    from bench.compare import ours

    crashed = ours.CrashedRun(5000, 10000)
    store = ours.store()

    def today():
        crashed.reset()
        start = time.perf_counter()
        claim = store.claim(crashed.id, "bench:0:whatif", 60, time.time())
        loaded = store.load(crashed.id)
        assert claim is not None and loaded.checkpoint is not None
        return time.perf_counter() - start

    def one_statement():
        crashed.reset()
        start = time.perf_counter()
        now = datetime.now(UTC)
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(CLAIM_LOAD_SQL, ["bench:0:whatif", now + timedelta(seconds=60), now,
                                            crashed.id, now], prepare=True)
            row = cursor.fetchone()
            assert row is not None and row[2] is not None
            json.dumps(row[4])
        return time.perf_counter() - start

    connection.ensure_connection()
    a, b = _alternate(today, one_statement, per_round=30)
    print(f"claim + load of a run crashed at 5,000 steps: today {a * 1e3:.3f} ms, "
          f"one statement {b * 1e3:.3f} ms ({a / b:.1f}x faster)")
    crashed.delete()


def effect_indexes() -> None:
    """The one-statement effect commit with and without the unique index on the effect's
    idempotency key (the key is a function of the unique position, so the index only
    repeats the position's)."""
    from django.db import connection

    from runs.durable import control
    from runs.durable import records as r
    from runs.storage import database_store

    store = database_store()
    run = control.launch(store, agent="bench-effects", inputs={"n": 1})
    epoch = store.claim(run.id, "bench:0:whatif", 600, time.time()).run.epoch
    seq = [0]

    def commit():
        seq[0] += 1
        e = r.EffectRecord(branch=1, step_no=1, seq=seq[0], kind="call", tool="noop",
                           digest="d" * 32, key=f"{run.id}:1:1:{seq[0]}", idempotent=True,
                           status="done", args_preview=str(seq[0]), result=seq[0], attempts=1,
                           started_at=time.time(), finished_at=time.time(), epoch=epoch)
        store.commit(run.id, epoch, r.Commit(run=r.RunChanges(lease_expires_at=time.time() + 60),
                                             effects=[e], events=[("effect", {"seq": seq[0]})]))

    drop = "ALTER TABLE runs_effect DROP CONSTRAINT effect_unique_key"
    add = "ALTER TABLE runs_effect ADD CONSTRAINT effect_unique_key UNIQUE (key)"
    times = {"with": [], "without": []}
    for _ in range(4):
        for name, ddl_before, ddl_after in (("with", None, None), ("without", drop, add)):
            if ddl_before:
                with connection.cursor() as c:
                    c.execute(ddl_before)
            for _ in range(300):
                start = time.perf_counter()
                commit()
                times[name].append(time.perf_counter() - start)
            if ddl_after:
                with connection.cursor() as c:
                    c.execute(ddl_after)
    a, b = statistics.median(times["with"]), statistics.median(times["without"])
    print(f"effect commit (one statement): with the key's unique index {a * 1e3:.3f} ms, "
          f"without {b * 1e3:.3f} ms ({(a - b) / a * 100:.0f}% of the statement)")


def effect_statement_parts(effects: int = 1000, rounds: int = 6) -> None:
    """What the parts of a no-op effect's commit cost on the server: the statement the
    store sends (run row, effect row as a plain INSERT, event row), the same without its
    event row, the same with the upsert of an effect written before (ON CONFLICT ... DO
    UPDATE: an outcome after its intent), and the floor. The statements are those of a
    real run of `effects` no-op effects, captured as PgStore sends them and sent again
    from a bare psycopg connection (autocommit, prepared), so the client's own work is
    left out; the run's effects and events are deleted and the tables vacuumed before
    each block."""
    import psycopg
    from django.db import connection

    from bench.compare import ours
    from runs.storage import pg

    captured = []
    send = pg.execute  # wrapped for one run: the bench reads what the store sends

    def spy(sql, params, prepare=False):
        if sql.startswith("WITH run AS (UPDATE") and " eff AS " in sql:
            captured.append((sql, list(params)))
        return send(sql, params, prepare=prepare)

    pg.execute = spy
    try:
        run_id, _ = ours.run_in_process("bench-effects", {"n": effects})
    finally:
        pg.execute = send
    sql = captured[0][0]
    if any(s != sql for s, _ in captured):
        raise RuntimeError("the effects' commits took more than one statement shape")
    events_from, events_to = sql.index(", ev AS ("), sql.index(" SELECT epoch, event_seq")
    event_params = 5  # run_id, created_at, and the event's (ord, kind, data): _events_params
    no_event = sql[:events_from] + sql[events_to:]
    plain, upsert = (pg._effects_cte("eff", 1, upsert=u) for u in (False, True))
    if plain not in sql:
        raise RuntimeError("a new call's effect is not written with a plain INSERT")
    variants = {
        "the store's statement": lambda p: (sql, p),
        "without its event row": lambda p: (no_event, p[:-event_params]),
        "with an upsert of the effect": lambda p: (sql.replace(plain, upsert), p),
    }
    db = connection.settings_dict
    with psycopg.connect(dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"],
                         host=db["HOST"], port=db["PORT"] or None, autocommit=True,
                         prepare_threshold=0) as conn:
        # The floor here, not bench/setup_db.raw_insert_floor: its blocks alternate with
        # the statements' on this one connection, each after the same reset and vacuum.
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, v text)")
        first = conn.execute("SELECT min(seq) - 1 FROM runs_runevent WHERE run_id = %s "
                             "AND kind = 'effect'", [run_id]).fetchone()[0]

        def reset():
            conn.execute("DELETE FROM runs_effect WHERE run_id = %s", [run_id])
            conn.execute("DELETE FROM runs_runevent WHERE run_id = %s AND seq > %s",
                         [run_id, first])
            conn.execute("UPDATE runs_run SET event_seq = %s WHERE id = %s", [first, run_id])
            conn.execute("TRUNCATE bench_floor")
            for table in ("runs_effect", "runs_runevent", "runs_run", "bench_floor"):
                conn.execute(f"VACUUM {table}")

        times = {name: [] for name in [*variants, "floor"]}
        for _ in range(rounds):
            for name in times:
                reset()
                start = time.perf_counter()
                if name == "floor":
                    for _ in range(effects):
                        conn.execute("INSERT INTO bench_floor (v) VALUES (%s)", ["x" * 40])
                else:
                    for _, p in captured:
                        text, params = variants[name](p)
                        if conn.execute(text, params).fetchone() is None:
                            raise RuntimeError("a captured commit was fenced off")
                times[name].append((time.perf_counter() - start) / effects)
        reset()
        conn.execute("DROP TABLE bench_floor")
    floor = statistics.median(times["floor"])
    print(f"a no-op effect's commit, server and round trip only ({effects} effects, "
          f"median of {rounds} blocks):")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:30s} {median * 1e3:.3f} ms  [{min(values) * 1e3:.3f}-"
              f"{max(values) * 1e3:.3f}]  {median / floor:.2f}x the floor")


def main() -> None:
    checkpoint_commit()
    claim_and_load()
    effect_indexes()
    effect_statement_parts()
