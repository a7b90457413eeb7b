"""The chaos suite's CI profile, inside the test suite: seeded, a few minutes, the
same audit as the full run (docs/RELIABILITY.md).

It runs the harness as a child process (`python -m tests.chaos --ci`). On PostgreSQL
(DATABASE_URL) it brings a PostgreSQL server and a Redis of its own
(`--private-services`), with every fault including their restarts, so that nothing
else using the machine's servers (CI's other test streams) is restarted under it; on
the SQLite default a reduced profile without the PostgreSQL faults. Redis faults are in
when REDIS_URL is set.
"""

import os
import subprocess
import sys

import pytest

from tests.support.processes import ROOT

pytestmark = [pytest.mark.services]
# The harness's set-up (with --private-services its own PostgreSQL and Redis; the
# reference runs), the storm (1.75 min at most: tests/chaos/cli.py), the drain (it gives
# up after 45 s without a run moving) and the audit, on CI's loaded cores.
LIMIT_SECONDS = 420


@pytest.mark.timeout(LIMIT_SECONDS + 60)
def test_chaos_ci_profile_finds_nothing(tmp_path):
    database_url = os.environ.get("DATABASE_URL", "")
    args = [sys.executable, "-m", "tests.chaos", "--ci", "--workdir", str(tmp_path),
            "--report", str(tmp_path / "report.md")]
    if not database_url.startswith(("postgres://", "postgresql://")):
        args.append("--sqlite")
    if not os.environ.get("REDIS_URL"):
        args.append("--no-redis")
    if "--sqlite" not in args or "--no-redis" not in args:
        args.append("--private-services")
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                          timeout=LIMIT_SECONDS, check=False)
    report = (tmp_path / "report.md").read_text() if (tmp_path / "report.md").exists() else ""
    print(done.stdout[-20000:])
    assert done.returncode == 0, (
        f"chaos CI profile exited {done.returncode}\n{report or done.stdout[-8000:]}\n"
        f"{done.stderr[-4000:]}")
    assert "verdict: **PASS**" in report
