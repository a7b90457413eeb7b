"""Where the suite's time goes: wall and CPU of each directory and of the slowest tests.

A pytest plugin (tests/conftest.py loads it) and a command:

    bin/test ...                      # prints the table at the end of every run
    python -m tests.timing [FILE]     # prints it again from the run's file

Wall is the test's setup, call and teardown. CPU is the test process's own (user +
system) plus that of the child processes it reaped meanwhile (a Daphne, a worker tree
tree, a browser, counted when the test that stops them waits for them); a server shared
by a module is counted at the test that stops it. Under pytest-xdist each worker
measures its tests and the table adds them up. The run's figures are written to
var/test-timing.json (TIMING_FILE).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMING_FILE = Path(os.environ.get("AGENTOPS_TEST_TIMING_FILE", ROOT / "var" / "test-timing.json"))
SLOWEST = 20


def _cpu() -> float:
    mine, children = os.times(), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.user + mine.system + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    started = item.stash.get(_STARTED, None)
    if started is not None:
        report.user_properties.append(("cpu_seconds", _cpu() - started))
        item.stash[_STARTED] = _cpu()


_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_STARTED] = _cpu()


class Timings:
    def __init__(self):
        self.tests: dict[str, dict] = defaultdict(lambda: {"wall": 0.0, "cpu": 0.0})

    def add(self, report) -> None:
        entry = self.tests[report.nodeid]
        entry["wall"] += report.duration
        entry["cpu"] += dict(report.user_properties).get("cpu_seconds", 0.0)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.tests, indent=0))


def table(tests: dict[str, dict]) -> list[str]:
    """The lines the plugin and the command print."""
    by_dir: dict[str, dict] = defaultdict(lambda: {"tests": 0, "wall": 0.0, "cpu": 0.0})
    for nodeid, entry in tests.items():
        path = nodeid.split("::")[0]
        parts = path.split("/")
        where = "/".join(parts[:2]) if len(parts) > 2 else path
        row = by_dir[where]
        row["tests"] += 1
        row["wall"] += entry["wall"]
        row["cpu"] += entry["cpu"]
    wall = sum(e["wall"] for e in tests.values())
    cpu = sum(e["cpu"] for e in tests.values())
    lines = [f"time per directory ({len(tests)} tests; wall {wall:.0f} s, CPU {cpu:.0f} s; "
             "wall added up over parallel workers):",
             f"  {'directory':<40} {'tests':>6} {'wall s':>9} {'CPU s':>8}"]
    for where, row in sorted(by_dir.items(), key=lambda kv: -kv[1]["wall"]):
        lines.append(f"  {where:<40} {row['tests']:>6} {row['wall']:>9.1f} {row['cpu']:>8.1f}")
    lines.append(f"the {SLOWEST} slowest tests (wall, CPU):")
    slowest = sorted(tests.items(), key=lambda kv: -kv[1]["wall"])[:SLOWEST]
    for nodeid, entry in slowest:
        lines.append(f"  {entry['wall']:7.1f} s {entry['cpu']:7.1f} s  {nodeid}")
    return lines


class TimingPlugin:
    def __init__(self):
        self.timings = Timings()

    def pytest_runtest_logreport(self, report):
        self.timings.add(report)

    def pytest_terminal_summary(self, terminalreporter):
        if not self.timings.tests:
            return
        terminalreporter.section("timing")
        for line in table(self.timings.tests):
            terminalreporter.write_line(line)
        try:
            self.timings.save(TIMING_FILE)
        except OSError as exc:
            terminalreporter.write_line(f"(not saved to {TIMING_FILE}: {exc})")


def pytest_configure(config):
    # On an xdist worker the controller collects the reports; only it prints.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(TimingPlugin(), "agentops-timing")


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else TIMING_FILE
    try:
        tests = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"no timings at {path} ({exc}): run bin/test first", file=sys.stderr)
        return 1
    print("\n".join(table(tests)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
