"""Named fault points: armed in-process for unit tests, or by a file across processes."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runs.durable import WorkerConfig, control, execute_run
from runs.durable import faults as fault_points
from runs.durable.faults import POINTS, InjectedFault, faults
from runs.durable.memory import MemoryStore

from .agents_for_tests import REG, WORLD

ROOT = Path(__file__).resolve().parents[2]

HIT_WHEN_TOLD = textwrap.dedent("""
    import os, sys, time
    from runs.durable.faults import InjectedFault, faults
    go, point, tag = sys.argv[1:4]
    open(f"{go}.ready.{os.getpid()}", "w").close()
    deadline = time.monotonic() + 10
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        faults.hit(point, tag)
        print("quiet", flush=True)
    except InjectedFault:
        print("fired", flush=True)
""")


@pytest.fixture(autouse=True)
def clean_faults(monkeypatch):
    monkeypatch.setattr(faults, "directory", "")
    faults.disarm()
    yield
    faults.disarm()


@pytest.fixture
def faults_dir(tmp_path, monkeypatch):
    directory = tmp_path / "faults"
    directory.mkdir()
    monkeypatch.setattr(faults, "directory", str(directory))
    return directory


def spawn(script: str, *args: str, faults_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, AGENTOPS_FAULTS_DIR=str(faults_dir),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# --- in-process ----------------------------------------------------------------------------
def test_an_armed_action_runs_at_its_point_only():
    hits = []
    faults.arm("after_checkpoint", lambda: hits.append("after_checkpoint"))
    faults.hit("before_effect", "agent/tool")
    assert hits == []
    faults.hit("after_checkpoint", "agent/tool")
    faults.hit("after_checkpoint", "agent/tool")
    assert hits == ["after_checkpoint", "after_checkpoint"]  # in-process: until disarmed
    faults.disarm()
    faults.hit("after_checkpoint", "agent/tool")
    assert len(hits) == 2


def test_arming_an_unknown_point_is_refused():
    with pytest.raises(ValueError, match="unknown fault point 'after_lunch'"):
        faults.arm("after_lunch", "raise")


def test_named_actions_raise_and_sleep(monkeypatch):
    faults.arm("before_effect", "raise")
    with pytest.raises(InjectedFault):
        faults.hit("before_effect")
    slept = []
    monkeypatch.setattr(fault_points.time, "sleep", slept.append)  # asked for, not timed
    faults.arm("before_effect", "sleep:0.05")
    faults.hit("before_effect")
    assert slept == [0.05]
    monkeypatch.undo()
    faults.arm("before_effect", "dance")
    with pytest.raises(ValueError, match="unknown fault action 'dance'"):
        faults.hit("before_effect")


def test_a_plain_run_reaches_every_named_point_in_order():
    store = MemoryStore()
    WORLD.reset()
    hits = []
    for point in POINTS:
        faults.arm(point, lambda point=point: hits.append(point))
    run = control.launch(store, agent="idem_first", inputs={}, registry=REG)
    execute_run(store, run.id, WorkerConfig("w1", lease_seconds=0.2), registry=REG)
    slice_run = control.launch(store, agent="steps_every10", inputs={"n": 2}, registry=REG)
    execute_run(store, slice_run.id, WorkerConfig("w1", slice_seconds=0), registry=REG)
    # before_retry_wait needs a failing call that waits: tests/crash/test_retry_wait_crash.py;
    # the child runs' points need a parent: tests/durable/contract_children.py
    assert set(hits) == set(POINTS) - {"before_retry_wait", "after_spawn_before_log",
                                       "before_children_wait"}
    first_call = hits.index("before_effect")
    assert hits[first_call:first_call + 2] == ["before_effect", "after_effect_before_log"]
    first_checkpoint = hits.index("after_checkpoint_before_event")
    assert hits[first_checkpoint + 1] == "after_checkpoint"


# --- across processes: a file in AGENTOPS_FAULTS_DIR ------------------------------------------
def test_a_fault_file_fires_once_and_is_claimed(faults_dir):
    (faults_dir / "after_checkpoint").write_text("raise\n")
    with pytest.raises(InjectedFault):
        faults.hit("after_checkpoint", "crawl/tests.fetch")
    faults.hit("after_checkpoint", "crawl/tests.fetch")  # claimed: nothing more happens
    assert sorted(p.name for p in faults_dir.iterdir()) == [
        f"after_checkpoint.fired.{os.getpid()}"]


def test_a_fault_file_can_be_restricted_by_tag(faults_dir):
    (faults_dir / "before_effect").write_text("raise@crawl")
    faults.hit("before_effect", "migrate/tests.post_record")
    assert (faults_dir / "before_effect").exists()  # not for this agent: left armed
    with pytest.raises(InjectedFault):
        faults.hit("before_effect", "crawl/tests.fetch")
    assert not (faults_dir / "before_effect").exists()


def test_a_fault_file_fires_in_exactly_one_of_two_processes(faults_dir):
    for round_no in range(3):
        (faults_dir / "after_checkpoint").write_text("raise")
        go = faults_dir / f"go-{round_no}"
        procs = [spawn(HIT_WHEN_TOLD, str(go), "after_checkpoint", "a/t", faults_dir=faults_dir)
                 for _ in range(2)]
        deadline = time.monotonic() + 20
        while len(list(faults_dir.glob(f"{go.name}.ready.*"))) < 2:  # both at the start line
            assert time.monotonic() < deadline, "the processes never got ready"
            time.sleep(0.005)
        go.write_text("")
        outputs = [proc.communicate(timeout=20) for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0], outputs
        said = sorted(out.strip() for out, _ in outputs)
        assert said == ["fired", "quiet"], outputs
        fired_pid = next(p.pid for p, (out, _) in zip(procs, outputs) if out.strip() == "fired")
        fired = faults_dir / f"after_checkpoint.fired.{fired_pid}"
        assert fired.exists()
        assert not (faults_dir / "after_checkpoint").exists()
        fired.unlink()


def test_the_kill_action_kills_the_process_that_reaches_it(faults_dir):
    (faults_dir / "lease_renewal").write_text("kill")
    go = faults_dir / "go"
    go.write_text("")
    proc = spawn(HIT_WHEN_TOLD, str(go), "lease_renewal", "a/t", faults_dir=faults_dir)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGKILL
    assert out == ""
    assert (faults_dir / f"lease_renewal.fired.{proc.pid}").exists()
