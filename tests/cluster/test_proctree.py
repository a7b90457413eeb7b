"""runs/worker/proctree.py: the kernel's lists of children give what psutil's
scan of the host gives."""

import contextlib
import os
import subprocess
import sys

import psutil
import pytest

from runs.worker import proctree
from tests.support.processes import wait_until

# A child that starts a grandchild, then waits: a tree of two levels under this process.
TREE = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', " \
       "'import time; time.sleep(60)']); print('up', flush=True); time.sleep(60)"


@pytest.fixture
def tree():
    child = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "up\n"
    grandchildren = psutil.Process(child.pid).children()
    yield child
    for process in grandchildren:
        with contextlib.suppress(psutil.NoSuchProcess):  # gone with its parent already
            process.kill()
    child.kill()
    child.wait()


def pids(processes) -> set[int]:
    return {p.pid for p in processes}


def test_children_and_descendants_are_psutils(tree):
    me = psutil.Process()
    assert pids(proctree.children(os.getpid())) == pids(me.children()) >= {tree.pid}
    grandchildren = pids(psutil.Process(tree.pid).children())
    assert len(grandchildren) == 1
    assert pids(proctree.children(os.getpid(), recursive=True)) == \
        pids(me.children(recursive=True)) >= {tree.pid, *grandchildren}
    assert pids(proctree.children(tree.pid)) == grandchildren


def test_a_zombie_is_still_a_child(tree):
    (grandchild,) = psutil.Process(tree.pid).children()
    grandchild.kill()  # its parent does not reap it: a zombie
    wait_until(lambda: grandchild.status() == psutil.STATUS_ZOMBIE, message="a zombie")
    listed = {p.pid: p for p in proctree.children(tree.pid)}
    assert listed[grandchild.pid].status() == psutil.STATUS_ZOMBIE


def test_a_process_that_is_gone_raises_as_psutil_does(tree):
    tree.kill()
    tree.wait()
    with pytest.raises(psutil.NoSuchProcess):
        proctree.children(tree.pid)


def test_without_the_kernels_lists_psutil_scans(tree, monkeypatch):
    monkeypatch.setattr(proctree, "_child_pids", lambda pid: None)
    assert pids(proctree.children(os.getpid(), recursive=True)) == \
        pids(psutil.Process().children(recursive=True))
