"""The sweep's lease rule: a lease held by a process of this host that no longer exists
is expired at once (through the store), one held by a live process is left alone."""

import os
import socket
import subprocess
import time

import pytest

from runs import services
from runs.worker.execute import store
from runs.worker.sweep import expire_dead_local_leases

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_dead_local_workers_lease_expires_and_a_live_ones_holds():
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now
    host = socket.gethostname()
    owners = {"dead": f"{host}:{gone.pid}:1", "alive": f"{host}:{os.getpid()}:1",
              "elsewhere": f"another-host-{host}:{gone.pid}:1"}
    runs = {name: services.run_launch(user=None, agent="steps", inputs={"n": 1}).id
            for name in owners}
    now = time.time()
    for name, owner in owners.items():
        assert store().claim(runs[name], owner, 600, now) is not None
    assert expire_dead_local_leases() == 1
    due = store().due_runs(time.time() + 0.01)
    assert runs["dead"] in due
    assert runs["alive"] not in due and runs["elsewhere"] not in due
    assert expire_dead_local_leases() == 0  # nothing left to expire


def test_the_workers_store_passes_on_every_method_of_the_protocol():
    from runs.durable.store import Store
    from runs.worker.db import ReleasingStore

    protocol = {name for name in vars(Store) if not name.startswith("_")}
    assert protocol and protocol <= set(vars(ReleasingStore))
