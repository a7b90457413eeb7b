"""Every page and API list at a year of history: 1,000,000 runs and 50,000,000 events
in PostgreSQL (issue 31), filled by COPY (bench/scale_fill.py), then p50/p95 of each
page through Django's test Client as a logged-in user, an operator and API tokens.

    .venv/bin/python bench/scale.py [--runs 1000000] [--events 50000000] [--repeat 30]
        [--reuse] [--keep] [--fill-only] [--only NAME]

Prints a table of p50/p95 against the 200 ms target and EXPLAIN (ANALYZE, BUFFERS) of
every query over 200 ms; the baseline in the same process is a primary-key lookup of
one run through the same Client stack (the floor a page cannot go under). Without
--keep the database is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import time

from ops_common import percentile, setup_django

DB_NAME = "agentops_scale"
TARGET_MS = 200
SLOW_SQL_MS = 200


def make_users(owners: int):
    """The owners, an operator, a token of each kind; the ids of the owners."""
    from django.contrib.auth import get_user_model

    from runs.api import tokens
    from runs.operator.groups import ensure_operators_group

    User = get_user_model()
    users = [User.objects.get_or_create(username=f"user{k}")[0] for k in range(owners)]
    operator, _ = User.objects.get_or_create(username="bench-operator")
    operator.groups.add(ensure_operators_group())
    _, user_secret = tokens.create(users[0], name="bench", scopes=["read"], days=1, max_days=1)
    _, ops_secret = tokens.create(operator, name="bench", scopes=["read", "operate"], days=1,
                                  max_days=1)
    return users, operator, user_secret, ops_secret


def fill_database(args, owner_ids):
    import psycopg
    from django.db import connection
    from scale_fill import Plan, fill

    started = time.perf_counter()
    plan = Plan(args.runs, args.events, owner_ids, min(args.big_events, args.events // 2))
    print(f"plan of {args.runs:,} runs in {time.perf_counter() - started:.1f} s", flush=True)
    dsn = connection.settings_dict
    with psycopg.connect(host=dsn["HOST"], port=dsn["PORT"] or 5432, user=dsn["USER"],
                         password=dsn["PASSWORD"] or None, dbname=dsn["NAME"]) as conn:
        took = fill(conn, plan, args.effects_per_run)
    total = sum(took.values())
    print(f"filled in {total:.0f} s ({total / 60:.1f} min)", flush=True)
    return plan.ids[plan.big]


def table_sizes() -> list[tuple[str, int, int]]:
    from django.db import connection

    with connection.cursor() as c:
        c.execute("""SELECT relname, pg_total_relation_size(oid), reltuples::bigint
                     FROM pg_class WHERE relname IN ('runs_run', 'runs_runevent',
                       'runs_effect', 'runs_checkpoint') ORDER BY relname""")
        return c.fetchall()


def scenarios(big: str, deep_seq: int, api_cursor: str, ops_cursor: str) -> list[tuple]:
    """(name, who, url): `user` is user0 logged in, `ops` the operator, `token`/`optoken`
    their API tokens."""
    return [
        ("my runs", "user", "/"),
        ("my runs, active", "user", "/?status=active"),
        ("my runs, failed", "user", "/?status=failed"),
        ("my runs, agent=crawl", "user", "/?agent=crawl"),
        ("my runs, older (cursor)", "user", f"/?after={api_cursor}"),
        ("run page, 1M events", "user", f"/runs/{big}/"),
        ("run page, older events", "user", f"/runs/{big}/events/?before={deep_seq}"),
        ("API my runs", "token", "/api/v1/runs"),
        ("API my runs, active", "token", "/api/v1/runs?status=active"),
        ("API my runs, deep cursor", "token", f"/api/v1/runs?cursor={api_cursor}"),
        ("API events, first page", "token", f"/api/v1/runs/{big}/events"),
        ("API events, deep cursor", "token", f"/api/v1/runs/{big}/events?after={deep_seq}"),
        ("API all runs", "optoken", "/api/v1/runs?all=true"),
        ("API all runs, failed", "optoken", "/api/v1/runs?all=true&status=failed"),
        ("API all runs, owner", "optoken", "/api/v1/runs?all=true&owner=user3"),
        ("ops all runs", "ops", "/ops/"),
        ("ops status=running", "ops", "/ops/?status=running"),
        ("ops status=succeeded", "ops", "/ops/?status=succeeded"),
        ("ops needs attention", "ops", "/ops/?attention=on"),
        ("ops agent=crawl", "ops", "/ops/?agent=crawl"),
        ("ops owner=user3", "ops", "/ops/?owner=user3"),
        ("ops worker=host-1", "ops", "/ops/?worker=host-1"),
        ("ops stalled", "ops", "/ops/?stalled=any"),
        ("ops search run id", "ops", f"/ops/?q={big[:10]}"),
        ("ops search owner", "ops", "/ops/?q=user3"),
        ("ops sort oldest", "ops", "/ops/?sort=created"),
        ("ops deep cursor", "ops", f"/ops/?after={ops_cursor}"),
        ("ops failed+crawl+oldest", "ops", "/ops/?status=failed&agent=crawl&sort=created"),
        ("ops attention queue", "ops", "/ops/attention/"),
        ("ops run page, 1M events", "ops", f"/ops/runs/{big}/"),
        ("ops storage total", "ops", "/ops/storage/"),
        ("ops workers", "ops", "/ops/workers/"),
    ]


def clients(user, operator, user_secret, ops_secret) -> dict:
    from django.test import Client

    logged_user, logged_ops = Client(), Client()
    logged_user.force_login(user)
    logged_ops.force_login(operator)
    return {"user": (logged_user, {}), "ops": (logged_ops, {}),
            "token": (Client(), {"HTTP_AUTHORIZATION": f"Bearer {user_secret}"}),
            "optoken": (Client(), {"HTTP_AUTHORIZATION": f"Bearer {ops_secret}"})}


def timed(client, headers, url):
    """One request: its milliseconds and the queries it ran (sql, ms)."""
    from django.core.cache import cache
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    cache.clear()  # every figure is a cold cache's (the storage total is cached 60 s)
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        response = client.get(url, **headers)
        elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    return elapsed, [(q["sql"], float(q["time"]) * 1000) for q in captured.captured_queries]


def measure(cases, by_who, repeat):
    rows, slow = [], {}
    for name, who, url in cases:
        client, headers = by_who[who]
        timed(client, headers, url)  # warm
        times = []
        for _ in range(repeat):
            elapsed, queries = timed(client, headers, url)
            times.append(elapsed)
            for sql, ms in queries:
                if ms > SLOW_SQL_MS:
                    slow.setdefault(sql, (name, ms))
        rows.append((name, percentile(times, 50), percentile(times, 95), len(queries)))
        p95 = rows[-1][2]
        print(f"  {name:<28} p50 {rows[-1][1]:7.1f} ms  p95 {p95:7.1f} ms  "
              f"queries {len(queries):2d}  {'ok' if p95 < TARGET_MS else 'OVER 200 ms'}",
              flush=True)
    return rows, slow


def explain(sql: str) -> str:
    from django.db import connection

    with connection.cursor() as c:
        c.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
        return "\n".join(row[0] for row in c.fetchall())


def cursors(big: str, user) -> tuple[int, str, str]:
    """A deep event number, and cursors 100,000 runs (or half way) into user0's runs
    (my runs, the API's list) and into all runs."""
    from runs.models import Run
    from runs.operator.selectors import encode_cursor

    deep_seq = Run.objects.get(pk=big).event_seq * 9 // 10
    mine = Run.objects.filter(owner=user).order_by("-created_at", "-pk")
    all_runs = Run.objects.order_by("-created_at", "-pk")
    n_mine, n_all = mine.count(), Run.objects.count()
    return (deep_seq, encode_cursor(mine[min(100_000, n_mine // 2)], "created_at"),
            encode_cursor(all_runs[min(100_000, n_all // 2)], "created_at"))


def report(rows, slow, baseline, sizes, runs, events):
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    print(f"\n{'page':<28} {'p50 ms':>8} {'p95 ms':>8} {'/target':>8}")
    for name, p50, p95, _ in rows:
        print(f"{name:<28} {p50:8.1f} {p95:8.1f} {p95 / TARGET_MS:7.2f}x")
    over = [row for row in rows if row[2] >= TARGET_MS]
    print(f"\nbaseline (one run's API, a primary-key read): p50 {baseline[0]:.1f} ms "
          f"p95 {baseline[1]:.1f} ms; slowest page p95 / baseline p95: "
          f"{max(r[2] for r in rows) / baseline[1]:.1f}x")
    print(f"pages over {TARGET_MS} ms at p95: {len(over)} of {len(rows)}"
          + (f" ({', '.join(r[0] for r in over)})" if over else ""))
    print("\ntable sizes (pg_total_relation_size: heap, TOAST, indexes):")
    per = {"runs_run": runs, "runs_runevent": events}
    for name, size, tuples in sizes:
        count = per.get(name) or tuples
        print(f"  {name:<16} {size / 2**20:10.1f} MiB  {count:>12,} rows  "
              f"{size / max(1, count):7.0f} bytes a row")
    for sql, (name, ms) in slow.items():
        print(f"\nquery over {SLOW_SQL_MS} ms ({ms:.0f} ms, in '{name}'):\n{sql}\n{explain(sql)}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=50_000_000)
    parser.add_argument("--big-events", type=int, default=1_000_000)
    parser.add_argument("--effects-per-run", type=int, default=2)
    parser.add_argument("--owners", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--reuse", action="store_true", help="measure the database as filled")
    parser.add_argument("--keep", action="store_true", help="do not drop the database")
    parser.add_argument("--fill-only", action="store_true")
    parser.add_argument("--only", default="", help="measure the pages whose name has this")
    args = parser.parse_args()
    setup_django(DB_NAME, fresh=not args.reuse)
    try:
        run(args)
    finally:
        if not args.keep:
            drop()


def run(args):
    from django.db import connection
    from django.db.models import Sum

    from runs.models import Run

    users, operator, user_secret, ops_secret = make_users(args.owners)
    if not args.reuse:
        big = fill_database(args, [u.pk for u in users])
    else:
        big = Run.objects.filter(owner=users[0]).order_by("-event_seq").values_list(
            "pk", flat=True)[0]
    if args.fill_only:
        return
    deep_seq, api_cursor, ops_cursor = cursors(big, users[0])
    by_who = clients(users[0], operator, user_secret, ops_secret)
    runs = Run.objects.count()
    events = Run.objects.aggregate(n=Sum("event_seq"))["n"]
    print(f"\n{runs:,} runs, {events:,} events; {args.repeat} requests each, server time in "
          f"process (PostgreSQL {connection.pg_version}); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores", flush=True)
    base_rows, _ = measure([("baseline: API one run", "token", f"/api/v1/runs/{big}")],
                           by_who, args.repeat)
    cases = [c for c in scenarios(big, deep_seq, api_cursor, ops_cursor) if args.only in c[0]]
    rows, slow = measure(cases, by_who, args.repeat)
    report(rows, slow, base_rows[0][1:3], table_sizes(), runs, events)


def drop():
    import psycopg
    from django.db import connections

    connections.close_all()
    base = connections.databases["default"]
    with psycopg.connect(host=base["HOST"], port=base["PORT"] or 5432, user=base["USER"],
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
    print(f"dropped {DB_NAME}")


if __name__ == "__main__":
    main()
