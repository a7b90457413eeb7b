"""PgStore's one-statement commits on PostgreSQL (runs/storage/pg.py): they are really
single statements, write what OrmStore's transactions write, and are fenced. On SQLite
database_store() builds an OrmStore, whose transactions must write the same rows."""

import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.durable import control
from runs.durable import records as r
from runs.durable.errors import FencedError, StoreFailure
from runs.durable.faults import InjectedFault, faults
from runs.models import Checkpoint, Run, RunEvent
from runs.storage import database_store, pg_statements
from runs.storage import pg as store_pg
from tests.durable.agents_for_tests import REG

pytestmark = pytest.mark.django_db(transaction=True)
ON_POSTGRESQL = connection.vendor == "postgresql"


@pytest.fixture
def statements(monkeypatch):
    """Counts the store's one-statement commits."""
    calls = []
    original = store_pg.execute

    def counted(sql, params, *, prepare):
        calls.append(sql)
        return original(sql, params, prepare=prepare)

    monkeypatch.setattr(store_pg, "execute", counted)
    return calls


@pytest.fixture
def claimed():
    store = database_store()
    run = control.launch(store, agent="steps", inputs={"n": 3}, registry=REG)
    claim = store.claim(run.id, "w1", 30, time.time())
    return store, run.id, claim.run.epoch


def checkpoint_commit(step_no: int, blob: bytes = b'{"i": 1}') -> r.Commit:
    checkpoint = r.CheckpointRecord(number=0, branch=1, step_no=step_no, blob=blob, codec="json",
                                    created_at=time.time())
    now = r.EffectRecord(branch=1, step_no=step_no, seq=0, kind=r.NOW, tool="now", digest="d",
                         key=f"k{step_no}", idempotent=False, status=r.DONE, result=1.5)
    return r.Commit(run=r.RunChanges(step_no=step_no, crash_count=0), checkpoint=checkpoint,
                    effects=[now], events=[("log", {"message": f"step {step_no}"})])


def test_a_step_checkpoint_commits_in_one_statement(claimed, statements):
    store, run_id, epoch = claimed
    with CaptureQueriesContext(connection) as django_queries:
        first = store.commit(run_id, epoch, checkpoint_commit(1))
        second = store.commit(run_id, epoch, checkpoint_commit(2, b'{"i": 2}'))
    if ON_POSTGRESQL:
        assert len(statements) == 2 and len(django_queries) == 0
        with connection.cursor() as cursor:  # prepared once, on Django's own connection
            cursor.execute("SELECT count(*) FROM pg_prepared_statements "
                           "WHERE statement LIKE '%%INSERT INTO runs_checkpoint%%'")
            assert cursor.fetchone()[0] == 1
        # and only while it is sent: a threshold left set counts every statement of the
        # connection, and keeps the text of each of Django's (a new one at every value)
        assert connection.connection.prepare_threshold is None
    else:
        assert statements == [] and len(django_queries) > 2
    assert (first.checkpoint_number, second.checkpoint_number) == (1, 2)
    assert second.event_seq == first.event_seq + 2 == 1 + 4
    events = list(RunEvent.objects.filter(run_id=run_id).order_by("seq")
                  .values_list("seq", "kind", "data"))
    assert [seq for seq, _, _ in events] == [1, 2, 3, 4, 5]  # contiguous
    assert events[-2:] == [(4, "log", {"message": "step 2"}),
                           (5, "checkpoint", {"number": 2})]  # the row holds the rest
    row = Checkpoint.objects.get(run_id=run_id, number=2)
    assert (row.step_no, bytes(row.blob), row.size, row.codec) == (2, b'{"i": 2}', 8, "json")
    run = Run.objects.get(pk=run_id)
    assert (run.step_no, run.checkpoint_count, run.event_seq) == (2, 2, 5)
    assert store.load(run_id).effects == []  # the now() values sit at or before the checkpoint


def test_a_fenced_checkpoint_commit_writes_nothing(claimed, statements):
    store, run_id, epoch = claimed
    store.commit(run_id, epoch, r.Commit(run=r.RunChanges(lease_expires_at=time.time() - 1)))
    assert store.claim(run_id, "w2", 30, time.time()) is not None  # the lease ran out
    with pytest.raises(FencedError):
        store.commit(run_id, epoch, checkpoint_commit(1))
    commits = [sql for sql in statements if sql.startswith("WITH run AS")]
    assert len(commits) == (2 if ON_POSTGRESQL else 0)
    assert not Checkpoint.objects.filter(run_id=run_id).exists()
    assert list(RunEvent.objects.filter(run_id=run_id).values_list("seq", flat=True)) == [1]


def test_a_fault_inside_the_checkpoint_fires_on_the_one_statement_path(claimed, statements):
    """Arming the point inside the checkpoint's transaction changes no statement: on
    PostgreSQL the production one-statement commit runs, and a fault there leaves
    neither the checkpoint nor its event."""
    store, run_id, epoch = claimed
    faults.arm("after_checkpoint_before_event", "raise")
    try:
        with pytest.raises(InjectedFault):
            store.commit(run_id, epoch, checkpoint_commit(1))
    finally:
        faults.disarm()
    assert len(statements) == (1 if ON_POSTGRESQL else 0)
    assert not Checkpoint.objects.filter(run_id=run_id).exists()
    assert list(RunEvent.objects.filter(run_id=run_id).values_list("seq", flat=True)) == [1]
    assert Run.objects.get(pk=run_id).checkpoint_count == 0
    result = store.commit(run_id, epoch, checkpoint_commit(1))  # the same commit, unarmed
    assert result.checkpoint_number == 1 and len(statements) == (2 if ON_POSTGRESQL else 0)


def test_a_resume_reads_every_live_effect_in_order_across_pages(claimed, monkeypatch):
    from runs.storage import orm as orm_store

    monkeypatch.setattr(orm_store, "LOAD_PAGE", 2)
    store, run_id, epoch = claimed
    effects = [r.EffectRecord(branch=1, step_no=1 + seq // 3, seq=seq % 3, kind=r.CALL,
                              tool="t", digest="d", key=f"k{seq}", idempotent=True,
                              status=r.DONE, result=seq) for seq in (4, 0, 3, 1, 2)]
    store.commit(run_id, epoch, r.Commit(effects=effects))
    assert [e.result for e in store.load(run_id).effects] == [0, 1, 2, 3, 4]


def test_a_launch_writes_its_run_and_first_event_in_one_statement(statements):
    store = database_store()
    with CaptureQueriesContext(connection) as django_queries:
        run = control.launch(store, agent="steps", inputs={"n": 3}, registry=REG)
    if ON_POSTGRESQL:
        assert len(statements) == 1 and len(django_queries) == 0
    row = Run.objects.get(pk=run.id)
    assert (row.status, row.event_seq, row.inputs, row.epoch) == (r.QUEUED, 1, {"n": 3}, 0)
    assert list(RunEvent.objects.filter(run_id=run.id).values_list("seq", "kind", "data")) == [
        (1, "status", {"status": r.QUEUED, "event": "launched"})]


def test_a_claim_is_one_conditional_update_that_returns_the_run(statements):
    store = database_store()
    run = control.launch(store, agent="steps", inputs={"n": 3}, registry=REG)
    statements.clear()
    with CaptureQueriesContext(connection) as django_queries:
        claim = store.claim(run.id, "w1", 30, time.time())
        taken = store.claim(run.id, "w2", 30, time.time())
    if ON_POSTGRESQL:  # with what the resume needs
        assert len(statements) == 2 and len(django_queries) == 0
        assert claim.loaded.run is claim.run and claim.loaded.checkpoint is None
    else:
        assert len(django_queries) == 2
    assert (claim.run.epoch, claim.run.lease_owner, claim.crashed) == (1, "w1", False)
    assert (claim.run.inputs, claim.run.status, claim.run.event_seq) == ({"n": 3}, r.QUEUED, 1)
    assert taken is None
    store.commit(run.id, 1, r.Commit(run=r.RunChanges(lease_expires_at=time.time() - 1)))
    again = store.claim(run.id, "w2", 30, time.time())  # the lease ran out: w1 died
    assert (again.run.epoch, again.run.lease_owner, again.crashed) == (2, "w2", True)


def test_a_claim_after_a_crash_loads_what_load_loads(claimed):
    """The one-statement claim's reading of a run (PostgreSQL) is load()'s, field by field."""
    store, run_id, epoch = claimed
    store.commit(run_id, epoch, checkpoint_commit(1))
    done = r.EffectRecord(branch=1, step_no=2, seq=0, kind=r.CALL, tool="t", digest="d",
                          key="k-done", idempotent=True, status=r.DONE, result={"a": [1]},
                          attempts=1, started_at=time.time(), finished_at=time.time())
    intent = r.EffectRecord(branch=1, step_no=2, seq=1, kind=r.CALL, tool="u", digest="e",
                            key="k-intent", idempotent=False, status=r.INTENT)
    store.commit(run_id, epoch, r.Commit(run=r.RunChanges(lease_expires_at=time.time() - 1,
                                                          progress_message="half"),
                                         effects=[done, intent]))
    claim = store.claim(run_id, "w2", 30, time.time())
    loaded = claim.loaded or store.load(run_id)
    expected = store.load(run_id)
    assert loaded.run == expected.run and loaded.checkpoint == expected.checkpoint
    assert [(e.key, e.status, e.result) for e in loaded.effects] == [
        ("k-done", r.DONE, {"a": [1]}), ("k-intent", r.INTENT, None)]
    for got, want in zip(loaded.effects, expected.effects, strict=True):
        assert got.started_at == pytest.approx(want.started_at, abs=1e-5)
        assert (got.finished_at or 0) == pytest.approx(want.finished_at or 0, abs=1e-5)
        assert got.position == want.position and got.epoch == want.epoch


def test_a_claim_leaves_a_long_tail_of_effects_to_load(claimed, monkeypatch):
    store, run_id, epoch = claimed
    monkeypatch.setattr(store_pg, "CLAIM_EFFECTS", 2)
    effects = [r.EffectRecord(branch=1, step_no=1, seq=seq, kind=r.CALL, tool="t", digest="d",
                              key=f"k{seq}", idempotent=True, status=r.DONE, result=seq)
               for seq in range(3)]
    store.commit(run_id, epoch, r.Commit(run=r.RunChanges(lease_expires_at=time.time() - 1),
                                         effects=effects))
    claim = store.claim(run_id, "w2", 30, time.time())
    assert claim.loaded is None and claim.run.epoch == epoch + 1
    assert [e.result for e in store.load(run_id).effects] == [0, 1, 2]


def test_a_claim_that_waited_on_a_zombies_commit_never_misses_its_writes(claimed):
    """A worker frozen past its lease wakes and commits an intent just as another worker
    claims the run. The claim's UPDATE waits for the zombie's row lock; on PostgreSQL its
    reads of the effects would use the snapshot taken before the zombie committed, and
    the new owner would call the tool again. The claim must see the intent or not
    happen at all (the sweep claims again; the zombie is fenced off by then)."""
    import threading

    from django.db import transaction

    store, run_id, epoch = claimed
    store.commit(run_id, epoch, r.Commit(run=r.RunChanges(lease_expires_at=time.time() - 1)))
    intent = r.EffectRecord(branch=1, step_no=1, seq=0, kind=r.CALL, tool="charge", digest="d",
                            key="k-zombie", idempotent=False, status=r.INTENT)
    holding, release, result = threading.Event(), threading.Event(), {}

    def zombie():
        try:
            with transaction.atomic():
                database_store().commit(run_id, epoch, r.Commit(effects=[intent]))
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    def claimer():
        try:
            result["claim"] = database_store().claim(run_id, "w2", 30, time.time())
        finally:
            connection.close()

    threads = [threading.Thread(target=zombie), threading.Thread(target=claimer)]
    threads[0].start()
    assert holding.wait(10)
    threads[1].start()
    if ON_POSTGRESQL:  # the claim is queued behind the zombie's lock
        deadline = time.monotonic() + 10
        with connection.cursor() as cursor:
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                               "'Lock' AND query LIKE '%%UPDATE runs_run SET epoch%%'")
                if cursor.fetchone()[0]:
                    break
                time.sleep(0.01)
            else:
                pytest.fail("the claim never waited for the zombie's lock")
    # (SQLite shows no waiting writer; there the claim and the load are two statements,
    # so whenever the claim gets in, the load sees the intent.)
    release.set()
    for thread in threads:
        thread.join(20)
    claim = result["claim"]
    if claim is None:  # refused: the sweep claims again, and then sees the intent
        claim = store.claim(run_id, "w2", 30, time.time())
    loaded = claim.loaded or store.load(run_id)
    assert [(e.key, e.status) for e in loaded.effects] == [("k-zombie", r.INTENT)]
    with pytest.raises(FencedError):  # the zombie's next write is refused
        store.commit(run_id, epoch, r.Commit(effects=[intent]))


def test_an_effects_commit_statement_is_built_once_per_shape(claimed, statements):
    """The statement's text depends on the commit's shape only (the run fields it sets,
    how many effects and events, a checkpoint, a release, an ending): the next commit
    of the same shape sends the same string without building it again, so psycopg
    finds it prepared by identity."""
    store, run_id, epoch = claimed

    def effect_commit(seq: int) -> r.Commit:
        done = r.EffectRecord(branch=1, step_no=1, seq=seq, kind=r.CALL, tool="tests.bump",
                              digest="d", key=f"{run_id}:1:1:{seq}", idempotent=True,
                              status=r.DONE, result=seq, attempts=1, started_at=time.time(),
                              finished_at=time.time())
        return r.Commit(run=r.RunChanges(lease_expires_at=time.time() + 30), effects=[done],
                        events=[("effect", {"seq": seq})])

    store.commit(run_id, epoch, effect_commit(0))
    built = store_pg._statement.cache_info().misses
    for seq in (1, 2):
        store.commit(run_id, epoch, effect_commit(seq))
    if ON_POSTGRESQL:
        assert store_pg._statement.cache_info().misses == built
        assert statements[-1] is statements[-2] is statements[-3]
        # its result's columns are read once per statement text, not from every result
        assert pg_statements._COLUMN_NAMES[statements[-1]] == (
            "epoch", "event_seq", "control", "agent", "number")
    assert [e.result for e in store.load(run_id).effects] == [0, 1, 2]
    seqs = list(RunEvent.objects.filter(run_id=run_id, kind="effect")
                .values_list("seq", "data"))
    assert [data for _, data in seqs] == [{"seq": 0}, {"seq": 1}, {"seq": 2}]
    assert [seq for seq, _ in seqs] == [2, 3, 4]  # numbered on from the launch's


def test_statements_on_a_connection_share_its_cursor_whichever_thread_sends_them(claimed):
    """PgStore keeps one cursor per connection (making one per statement was a fifth of a
    commit's client work). Not one per thread: a worker's run threads take turns on a few
    pooled connections, and a thread's own cursor held its last values and result while
    its run waited. A connection Django closed and opened again gets a cursor of its own,
    and a thread sending on a connection another thread used finds that one's cursor."""
    store, run_id, epoch = claimed
    store.commit(run_id, epoch, r.Commit(run=r.RunChanges(step_no=1)))
    kept = getattr(connection.connection, pg_statements.KEPT_CURSOR, None)
    store.commit(run_id, epoch, r.Commit(run=r.RunChanges(step_no=2)))
    if ON_POSTGRESQL:
        assert kept is not None and kept.connection is connection.connection
        assert getattr(connection.connection, pg_statements.KEPT_CURSOR) is kept
        # another thread on the same connection (as a pool hands one to any thread)
        seen, shared = [], connection.connection
        other = threading.Thread(target=lambda: seen.append(pg_statements._kept_cursor(shared)))
        other.start()
        other.join()
        assert seen == [kept]
    connection.close()
    store.commit(run_id, epoch, r.Commit(run=r.RunChanges(step_no=3)))
    if ON_POSTGRESQL:
        fresh = getattr(connection.connection, pg_statements.KEPT_CURSOR)
        assert fresh is not kept and fresh.connection is connection.connection
    assert Run.objects.get(pk=run_id).step_no == 3


def test_a_new_effect_is_a_plain_insert_and_a_write_again_an_upsert(claimed, statements):
    """A record the engine made and no commit carried yet (EffectRecord.unwritten) has no
    row: PgStore writes it with a plain INSERT (no speculative insertion). The next
    write of the same position (the outcome after its intent) updates the row. The
    journal marks a record written once a commit carried it, even one that failed
    (it may have landed): a new record written again would fail on the position's key."""
    from runs.durable.journal import Journal
    from runs.durable.lease import LeaseState

    store, run_id, epoch = claimed
    run = store.load(run_id).run
    journal = Journal(store, run, LeaseState(run_id, epoch, "w1", time.time() + 30, None), 30)
    intent = r.EffectRecord(branch=1, step_no=1, seq=0, kind=r.CALL, tool="tests.charge",
                            digest="d", key=f"{run_id}:1:1:0", idempotent=False,
                            status=r.INTENT, unwritten=True)
    journal.log_effect(intent)
    assert not intent.unwritten
    intent.succeed({"charged": 1}, at=time.time())
    journal.log_effect(intent)
    fresh = r.EffectRecord(branch=1, step_no=1, seq=1, kind=r.CALL, tool="tests.bump",
                           digest="d", key=f"{run_id}:1:1:1", idempotent=True, status=r.DONE,
                           result=2, unwritten=True)
    journal.log_effect(fresh)
    if ON_POSTGRESQL:
        assert ["ON CONFLICT" in sql for sql in statements] == [False, True, False]
    assert [(e.seq, e.status, e.result) for e in store.load(run_id).effects] == [
        (0, r.DONE, {"charged": 1}), (1, r.DONE, 2)]
    if not ON_POSTGRESQL:
        return  # OrmStore writes every effect by its position, new or not
    again = r.EffectRecord(branch=1, step_no=1, seq=1, kind=r.CALL, tool="tests.bump",
                           digest="d", key=f"{run_id}:1:1:1", idempotent=True, status=r.DONE,
                           result=3, unwritten=True)
    with pytest.raises(StoreFailure):  # a position written before is never "unwritten"
        journal.log_effect(again)
    assert not again.unwritten  # the failed commit may have landed: an upsert next time
    journal.commit(r.Commit())  # the record, still buffered, goes again: an upsert
    assert "ON CONFLICT" in statements[-1]
    assert store.load(run_id).effects[1].result == 3
