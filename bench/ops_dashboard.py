"""The operators' all-runs page with 100,000 runs and 1,000,000 effects in PostgreSQL.

Measures the server time of full requests (middleware, auth, queries, template) for
the first page, deep pages reached by the keyset cursor, every filter, search and
sort; counts queries per page; and compares with the usual baseline in the same
process: Django's Paginator (COUNT(*) + OFFSET) over the same queryset.

    .venv/bin/python bench/ops_dashboard.py [--runs 100000] [--effects-per-run 10] [--reuse]

Target: p95 under 100 ms, queries per page constant.
"""

from __future__ import annotations

import argparse
import re
import time

from ops_common import percentile, setup_django, summary

DB_NAME = "agentops_ops_bench"


def insert_select(model, exprs: dict, source: str, params: dict) -> None:
    """INSERT INTO model's table SELECT exprs FROM source; every column not given gets
    the field's Python default, so the loader survives new columns with defaults."""
    import json

    from django.db import connection, models

    columns, values, params = [], [], dict(params)
    for field in model._meta.concrete_fields:
        if isinstance(field, models.AutoField):
            continue
        columns.append(field.column)
        if field.column in exprs:
            values.append(exprs[field.column])
            continue
        default = field.get_default()
        if isinstance(field, models.JSONField):
            default = None if default is None else json.dumps(default)
        params[f"d_{field.column}"] = default
        values.append(f"%(d_{field.column})s")
    sql = (f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) "
           f"SELECT {', '.join(values)} FROM {source}")
    with connection.cursor() as c:
        c.execute(sql, params)


STATUS_SQL = """(CASE WHEN g %% 100 < 88 THEN 'succeeded' WHEN g %% 100 < 91 THEN 'failed'
    WHEN g %% 100 < 93 THEN 'running' WHEN g %% 100 < 94 THEN 'needs_attention'
    WHEN g %% 100 < 96 THEN 'paused' WHEN g %% 100 < 98 THEN 'queued'
    ELSE 'cancelled' END)"""
CREATED_SQL = "now() - g * interval '7 seconds'"
ATTENTION_SQL = """CASE WHEN s.status = 'needs_attention'
    THEN '{"kind": "crash_loop", "message": "x"}'::jsonb END"""


def load(runs: int, effects_per_run: int, checkpoints_per_run: int = 3) -> None:
    from django.db import connection

    from runs.models import Checkpoint, Effect, Run

    started = time.perf_counter()
    with connection.cursor() as c:
        c.execute("""
            INSERT INTO auth_user (username, password, is_superuser, is_staff, is_active,
                                   first_name, last_name, email, date_joined)
            SELECT 'user' || g, '!', false, false, true, '', '', '', now()
            FROM generate_series(1, 50) g""")
        c.execute("SELECT min(id) FROM auth_user")
        first_user = c.fetchone()[0]
    insert_select(Run, {
        "id": "md5(g::text)", "owner_id": "%(u)s + g %% 50",
        "agent": "(ARRAY['crawl','migrate','llm','ticker'])[1 + g %% 4]",
        "agent_version": "'1'", "status": "s.status", "step_no": "10", "epoch": "1",
        "lease_owner": "CASE WHEN s.status = 'running' THEN 'worker-' || (g %% 4) || ':' "
                       "|| (1000 + g %% 8) || ':tok' END",
        "lease_expires_at": "CASE WHEN s.status = 'running' THEN now() + interval '5 seconds' END",
        "attention": ATTENTION_SQL,
        "progress_done": "10", "progress_total": "10", "event_seq": "30",
        "checkpoint_count": "%(cp)s", "created_at": CREATED_SQL,
        "updated_at": f"{CREATED_SQL} + interval '3 seconds'",
        "finished_at": f"CASE WHEN s.status IN ('succeeded','failed','cancelled') "
                       f"THEN {CREATED_SQL} + interval '3 seconds' END",
    }, f"generate_series(1, %(n)s) g, LATERAL (SELECT {STATUS_SQL} AS status) s",
        {"u": first_user, "n": runs, "cp": checkpoints_per_run})
    insert_select(Effect, {
        "run_id": "r.id", "branch": "1", "step_no": "e", "seq": "0", "kind": "'call'",
        "tool": "'tools.fetch'", "digest": "md5(r.id || e)", "key": "r.id || ':1:' || e || ':0'",
        "idempotent": "e %% 2 = 0", "status": "'done'",
        "args_preview": "'https://example.com/' || e", "result": """'{"ok": true}'::jsonb""",
        "attempts": "1", "started_at": "r.created_at", "finished_at": "r.created_at",
        "worker": "'worker-1:1000:tok'",
    }, "runs_run r, generate_series(1, %(e)s) e", {"e": effects_per_run})
    insert_select(Checkpoint, {
        "run_id": "r.id", "number": "k", "branch": "1", "step_no": "k", "codec": "'json'",
        "blob": "convert_to(repeat('x', 200 + k * 50), 'UTF8')", "size": "200 + k * 50",
        "reason": "'step'", "created_at": "r.created_at",
    }, "runs_run r, generate_series(1, %(cp)s) k", {"cp": checkpoints_per_run})
    with connection.cursor() as c:
        c.execute("ANALYZE")
    print(f"loaded {runs} runs, {runs * effects_per_run} effects, "
          f"{runs * checkpoints_per_run} checkpoints in {time.perf_counter() - started:.1f} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--effects-per-run", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--reuse", action="store_true", help="keep the loaded database")
    args = parser.parse_args()
    setup_django(DB_NAME, fresh=not args.reuse)

    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.core.paginator import Paginator
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from runs.models import Run
    from runs.operator.groups import ensure_operators_group
    from runs.operator.selectors import filtered_runs

    if not Run.objects.exists():
        load(args.runs, args.effects_per_run)
    total = Run.objects.count()
    operator, _ = get_user_model().objects.get_or_create(username="bench-operator")
    operator.groups.add(ensure_operators_group())
    client = Client()
    client.force_login(operator)
    cache.clear()
    client.get("/ops/storage/")  # the total is cached, as in production

    sample = Run.objects.order_by("created_at").values_list("id", flat=True)[total // 2]
    scenarios = {
        "first page": "/ops/",
        "status=running": "/ops/?status=running",
        "needs attention": "/ops/?attention=on",
        "agent=crawl": "/ops/?agent=crawl",
        "owner=user7": "/ops/?owner=user7",
        "worker=worker-3": "/ops/?worker=worker-3",
        "stalled": "/ops/?stalled=any",
        "search run id": f"/ops/?q={sample[:10]}",
        "search owner": "/ops/?q=user3",
        "sort oldest": "/ops/?sort=created",
        "failed, crawl, oldest": "/ops/?status=failed&agent=crawl&sort=created",
    }
    all_times, queries = [], {}

    def timed(url):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(url)
            elapsed = (time.perf_counter() - started) * 1000
        assert response.status_code == 200, (url, response.status_code)
        return elapsed, len(captured), response

    print(f"\n{total} runs; each figure: {args.repeat} requests (server time, in process)")
    for name, url in scenarios.items():
        timed(url)  # warm
        times = []
        for _ in range(args.repeat):
            elapsed, n, _ = timed(url)
            times.append(elapsed)
            queries.setdefault(n, set()).add(name)
        all_times += times
        print(f"  {name:<24} {summary(times)}  queries={n}")

    # deep pages: follow the "next" cursor 100 pages (5,000 runs) into the list
    url, deep = "/ops/", []
    for _ in range(100):
        elapsed, n, response = timed(url)
        deep.append(elapsed)
        queries.setdefault(n, set()).add("pages 1-100")
        link = re.search(r'<a rel="next" href="([^"]+)"', response.content.decode())
        url = "/ops/" + link.group(1).replace("&amp;", "&")
    all_times += deep
    print(f"  {'pages 1-100 by cursor':<24} {summary(deep)}")
    print(f"\nall pages: {summary(all_times)}")
    for n, names in sorted(queries.items()):
        print(f"queries per page: {n} for {', '.join(sorted(names))}")

    # baseline: Django's Paginator (COUNT(*) + OFFSET), the same queryset, no rendering
    def paginator_page(number, filters=None):
        qs = filtered_runs(filters or {}).order_by("-created_at", "-pk")
        started = time.perf_counter()
        page = Paginator(qs, 50).page(number)
        list(page.object_list)
        return (time.perf_counter() - started) * 1000

    base_first = [paginator_page(1) for _ in range(args.repeat)]
    base_deep = [paginator_page(n) for n in range(1, 2001, 20)]  # up to page 2,000
    print(f"\nbaseline Paginator page 1 (queries only): {summary(base_first)}")
    print(f"baseline Paginator pages 1-2000 (queries only): {summary(base_deep)}")
    ours_deep = [timed("/ops/?after=" + _cursor_at(n * 50))[0] for n in range(1, 2001, 20)]
    print(f"keyset pages 1-2000 (full requests): {summary(ours_deep)}")
    ratio = percentile(ours_deep, 95) / percentile(base_deep, 95)
    print(f"\nratio p95 keyset request / p95 Paginator queries over pages 1-2000: {ratio:.2f}")
    p95 = percentile(all_times, 95)
    print(f"target p95 < 100 ms: {'met' if p95 < 100 else 'MISSED'} ({p95:.1f} ms); "
          f"queries per page: {min(queries)}-{max(queries)} whatever the rows; they vary by filter"
          f" (a search or an owner filter looks users up first)")


def _cursor_at(offset: int) -> str:
    """The cursor that starts the page after `offset` runs (newest first)."""
    from runs.models import Run
    from runs.operator.selectors import encode_cursor

    run = Run.objects.order_by("-created_at", "-pk")[offset - 1]
    return encode_cursor(run, "created_at")


if __name__ == "__main__":
    main()
