"""The tree's main once its workers are forked (runs/worker/watcher.py), in parts: how it
reads a stopped process, and its log lines (the whole of it runs in tests/cluster/test_tree.py)."""

import json
import logging
import signal
import subprocess

from runs.observability.logs import ContextFilter, JsonFormatter
from runs.worker import watcher
from tests.support.processes import wait_until


def test_a_process_reads_stopped_from_sigstop_to_sigcont():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert not watcher.is_stopped(sleeper.pid)
        sleeper.send_signal(signal.SIGSTOP)
        wait_until(lambda: watcher.is_stopped(sleeper.pid), 10, message="stopped")
        sleeper.send_signal(signal.SIGCONT)
        wait_until(lambda: not watcher.is_stopped(sleeper.pid), 10, message="running again")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not watcher.is_stopped(sleeper.pid)  # gone


def test_its_json_lines_have_the_fields_of_the_projects(capsys):
    watcher.line_writer("json")("error", 'worker tree damaged: "worker 1" ended')
    line = json.loads(capsys.readouterr().err)
    record = logging.LogRecord("agentops.tree", logging.ERROR, __file__, 1, "m", (), None)
    ContextFilter().filter(record)
    project = json.loads(JsonFormatter().format(record))
    assert set(line) == set(project)
    assert (line["level"], line["logger"]) == ("error", "agentops.tree")
    assert line["message"] == 'worker tree damaged: "worker 1" ended'
    assert line["worker"].endswith(f":{line['worker'].split(':')[1]}") and line["run_id"] is None


def test_its_text_lines_read_as_the_projects(capsys):
    watcher.line_writer("text")("warning", "workers [1] still running")
    words = capsys.readouterr().err.split()
    assert words[3:6] == ["agentops.tree", "WARNING", "workers"]
