"""A fleet of worker hosts for the fleet tests and bench/fleet.py (docs/fleet.md): hosts
in network namespaces on a bridge (tests/support/netns.py), PgBouncer in transaction
mode, a relay to Redis and the sandbox's Daphne on the bridge's address
(tests/support/fleet_services.py), a worker tree per host started on demand, and runs
of tests/fleet/agents.py. `stop` ends and removes all of it."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from django.db import connection

import tests.fleet.agents  # noqa: F401  (registers the agent the fleet runs)
from runs import services
from tests.support import fleet_services, netns
from tests.support.processes import NO_TIME_SLICES, Cluster

LEASE_SECONDS = 2


class Fleet:
    """`database_delay`: seconds to hold each chunk on its way to PgBouncer (called per
    chunk: a slow network to the database, through a delaying relay)."""

    def __init__(self, tmp_path, hosts: int, database_delay=None):
        self.tmp_path = tmp_path
        self.marks = tmp_path / "marks"
        self.marks.mkdir(exist_ok=True)  # a test may make two fleets
        self.clusters: list[Cluster] = []
        self.pgbouncer = self.relay = self.sandbox = self.slow = None
        self.network = netns.Network(hosts)
        self.hosts = self.network.hosts
        try:
            address = self.network.address
            self.pgbouncer = fleet_services.PgBouncer(address, connection.settings_dict)
            self.database_url = self.pgbouncer.url
            if database_delay is not None:
                self.slow = fleet_services.Relay(address, (address, self.pgbouncer.port),
                                                 delay=database_delay)
                self.database_url = self.pgbouncer.url.replace(
                    f":{self.pgbouncer.port}/", f":{self.slow.port}/")
            redis = urlsplit(os.environ.get("REDIS_URL", ""))
            if redis.hostname:
                self.relay = fleet_services.Relay(address, (redis.hostname, redis.port or 6379))
            self.sandbox = fleet_services.BridgeServer(tmp_path, address)
        except BaseException:
            self.stop()
            raise

    def env(self, **extra) -> dict:
        """A host's worker settings: everything through the bridge."""
        env = {"DATABASE_URL": self.database_url, "AGENTOPS_DB_TRANSACTION_POOLING": 1,
               "AGENTOPS_LEASE_SECONDS": LEASE_SECONDS, "AGENTOPS_WORKER_DB_POOL": 3,
               "AGENTOPS_DB_CONNECT_TIMEOUT": 2,
               "AGENTOPS_SANDBOX_URL": f"{self.sandbox.url}/sandbox",
               "AGENTOPS_AGENT_MODULES": "tests.fleet.agents", **NO_TIME_SLICES}
        if self.relay is not None:
            redis = urlsplit(os.environ["REDIS_URL"])
            env["REDIS_URL"] = f"redis://{self.relay.address}:{self.relay.port}{redis.path}"
        return {**env, **extra}

    def start(self, host: netns.Host, workers: int = 1, restart: bool = True,
              **env) -> Cluster:
        cluster = Cluster(self.tmp_path, workers=workers, name=host.hostname, restart=restart,
                          wrapper=host.wrap(), **self.env(**env))
        self.clusters.append(cluster)
        return cluster

    def start_all(self, each: dict | None = None, **env) -> dict[str, Cluster]:
        """A tree on every host at once (each start waits for its tree to be up): hostname
        -> its Cluster. `each`: settings of one host's, by hostname, over `env`."""
        each = each or {}
        with ThreadPoolExecutor(len(self.hosts)) as pool:
            started = {host.hostname: pool.submit(self.start, host,
                                                  **{**env, **each.get(host.hostname, {})})
                       for host in self.hosts}
        return {name: future.result() for name, future in started.items()}

    def launch(self, count: int, steps: int = 8, delay: float = 0.2, hold: int = -1,
               sleep: float = 0) -> list[str]:
        """Runs of tests/fleet/agents.py; with `hold`, each run's call of that unit waits
        for `release` (the hosts share this process's file system)."""
        inputs = {"steps": steps, "delay": delay, "marks": str(self.marks), "hold": hold,
                  "sleep": sleep}
        return [services.run_launch(user=None, agent="fleet_steps", inputs=inputs).id
                for _ in range(count)]

    def release(self, unit: str) -> None:
        (self.marks / f"release-{unit}").touch()

    def inside(self, host: netns.Host, unit: str) -> bool:
        """Whether `host` has entered the marked call of `unit`."""
        return (self.marks / f"{unit}@{host.hostname}").exists()

    def stop(self) -> None:
        for cluster in self.clusters:
            cluster.stop()
        for part in (self.sandbox, self.relay, self.slow, self.pgbouncer):
            if part is not None:
                part.stop()
        self.network.teardown()
