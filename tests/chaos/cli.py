"""`python -m tests.chaos`: options, profiles, and Django pointed at the chaos database.

    python -m tests.chaos                  the full profile (>= 200 runs, >= 100 faults)
    python -m tests.chaos --ci             the CI profile: seeded, a few minutes
    python -m tests.chaos --seed 42 --runs 60 --faults 30 --minutes 4
    python -m tests.chaos --faults worker_sigkill,pg_restart   only these kinds

The harness uses its own database: DATABASE_URL's server with the database
name `agentops_chaos` (dropped and created), or with --sqlite a SQLite file in the
work directory (the reduced profile: no PostgreSQL faults). Redis is REDIS_URL or
redis://127.0.0.1:6379/0; --no-redis runs without it (and without Redis faults).
Exit status: 0 when the audit found nothing, 1 on any finding, 2 on a harness error.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/agentops"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


@dataclass
class Profile:
    name: str
    seed: int
    runs: int
    faults: int
    minutes: float
    kinds: list[str]
    clusters: int = 2
    workers: int = 2
    lease_seconds: float = 3.0
    time_slice: float = 1.0
    follow_share: float = 0.25       # runs followed by a websocket client
    operator_share: float = 0.35     # racing operator actions per run launched
    drain_seconds: float = 120.0     # without any run moving, then the rest are stuck
    scale: int = 3                   # how long the step-by-step agents run


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ci", action="store_true", help="the small seeded CI profile")
    parser.add_argument("--seed", type=int, help="the RNG seed (default: random, printed)")
    parser.add_argument("--runs", type=int, help="runs to launch")
    parser.add_argument("--faults", help="how many faults (a number), or which kinds "
                                         "(comma-separated names), or both: 40:kind,kind")
    parser.add_argument("--minutes", type=float, help="the storm's length at most")
    parser.add_argument("--sqlite", action="store_true", help="SQLite: no PostgreSQL faults")
    parser.add_argument("--no-redis", action="store_true", help="no Redis, no Redis faults")
    parser.add_argument("--private-services", action="store_true",
                        help="a PostgreSQL and a Redis server of the run's own (on free ports), "
                             "so that pg_restart and redis_restart touch nothing shared")
    parser.add_argument("--database-url", help=f"the PostgreSQL server (default DATABASE_URL "
                                               f"or {DEFAULT_PG}); the database is agentops_chaos")
    parser.add_argument("--workdir", type=Path, help="logs and files (default: a temp dir)")
    parser.add_argument("--report", type=Path, help="also write the report (Markdown) here")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--list-faults", action="store_true", help="list the fault kinds")
    return parser.parse_args(argv)


def profile(args, kinds_available: list[str]) -> Profile:
    count, kinds = None, None
    if args.faults:
        head, _, tail = args.faults.partition(":")
        if head.isdigit():
            count, kinds = int(head), tail or None
        else:
            kinds = args.faults
    chosen = kinds_available
    if kinds:
        chosen = [k.strip() for k in kinds.split(",") if k.strip()]
        unknown = sorted(set(chosen) - set(kinds_available))
        if unknown:
            raise SystemExit(f"unknown or unavailable fault kinds: {', '.join(unknown)}; "
                             f"available here: {', '.join(kinds_available)}")
    seed = args.seed if args.seed is not None else (20261 if args.ci else random.randrange(10**6))
    if args.ci:
        base = Profile("ci", seed, runs=26, faults=len(chosen) + 4, minutes=1.75, kinds=chosen,
                       workers=1 if args.sqlite else 2, follow_share=0.3, drain_seconds=45)
    else:
        # scale 2: the workers stay below saturation, so a recovery is measured, not a queue
        base = Profile("full", seed, runs=220, faults=120, minutes=9.0, kinds=chosen, scale=2)
        if args.sqlite:
            base.workers = 1
    base.runs = args.runs or base.runs
    base.faults = count or base.faults
    base.minutes = args.minutes or base.minutes
    return base


def private_services(args, workdir: Path) -> dict:
    """Start the run's own servers; return what they replace in args, and the servers."""
    found = {"postgres": None, "redis": None}
    if not args.sqlite:
        from tests.chaos.stack import PrivatePostgresServer
        found["postgres"] = PrivatePostgresServer()
        args.database_url = found["postgres"].url
    if not args.no_redis:
        from tests.chaos.stack import Redis
        from tests.support.processes import free_port
        directory = workdir / "redis"
        directory.mkdir(parents=True, exist_ok=True)
        found["redis"] = Redis(f"redis://127.0.0.1:{free_port()}/0", str(directory))
        found["redis"].start()
        os.environ["REDIS_URL"] = found["redis"].url
    return found


def configure_django(args, workdir: Path) -> dict:
    """Point this process (and, through process_env, its children) at the chaos database."""
    database_url = None
    if not args.sqlite:
        from tests.chaos.stack import with_database
        database_url = with_database(args.database_url or os.environ.get("DATABASE_URL")
                                     or DEFAULT_PG, "agentops_chaos")
        if not database_url.startswith(("postgres://", "postgresql://")):
            raise SystemExit("--database-url must be a PostgreSQL URL (or use --sqlite)")
        os.environ["DATABASE_URL"] = database_url
    else:
        os.environ.pop("DATABASE_URL", None)
        os.environ["SQLITE_PATH"] = str(workdir / "agentops.sqlite3")
    redis_url = None if args.no_redis else (os.environ.get("REDIS_URL") or DEFAULT_REDIS)
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    else:
        os.environ.pop("REDIS_URL", None)
    from tests.chaos.stack import AGENT_MODULES
    from tests.support.processes import free_port
    os.environ["AGENTOPS_AGENT_MODULES"] = AGENT_MODULES
    # The sandbox's address must be known before Django loads the built-in agents.
    sandbox_port = free_port()
    os.environ["AGENTOPS_SANDBOX_URL"] = f"http://127.0.0.1:{sandbox_port}/sandbox"
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentops.settings"
    os.environ.setdefault("AGENTOPS_LOG_LEVEL", "WARNING")
    return {"database_url": database_url, "redis_url": redis_url, "sandbox_port": sandbox_port}


def main(argv=None) -> int:
    args = parse(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentops-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    own = private_services(args, workdir) if args.private_services else {}
    try:
        return run(args, workdir, own)
    finally:
        if own.get("postgres") is not None:
            own["postgres"].close()
        if own.get("redis") is not None:
            own["redis"].stop()


def run(args, workdir: Path, own: dict) -> int:
    urls = configure_django(args, workdir)
    from tests.chaos.stack import Postgres, Redis
    postgres = own.get("postgres") or (Postgres(urls["database_url"]) if urls["database_url"]
                                       else None)
    if postgres is not None:
        postgres.use_database(urls["database_url"])  # the chaos database on that server
    redis = own.get("redis") or (Redis(urls["redis_url"]) if urls["redis_url"] else None)
    if postgres is not None:
        postgres.ensure_running()
        postgres.recreate()  # before Django opens a connection to it
    if redis is not None:
        redis.ensure_running()
    import django
    django.setup()
    from tests.chaos import faults as fault_kinds
    from tests.chaos.harness import Harness

    available = fault_kinds.available(postgres=postgres is not None, redis=redis is not None)
    if args.list_faults:
        print("\n".join(available))
        return 0
    chosen = profile(args, available)
    harness = Harness(chosen, workdir, postgres=postgres, redis=redis,
                      sandbox_port=urls["sandbox_port"])
    try:
        result = harness.run()
    except Exception:
        import traceback
        traceback.print_exc()
        print(f"chaos: harness error (seed {chosen.seed}; logs in {workdir})", file=sys.stderr)
        return 2
    from tests.chaos.report import render
    text = render(result)
    print(text)
    if args.report:
        args.report.write_text(text)
    if args.json:
        import json
        args.json.write_text(json.dumps(result.as_json(), indent=2, default=str))
    return 1 if result.findings else 0
