"""The fleet of worker hosts a test makes (tests/support/fleet.py): hosts in network
namespaces on a bridge, PgBouncer in transaction mode, a relay to Redis and the
sandbox's Daphne on the bridge's address, a worker tree per host started on demand.
Everything is stopped and removed after the test, whatever its outcome (and at exit).

Run on PostgreSQL, as root (tests/conftest.py's placement; docs/fleet.md)."""

import pytest

from tests.support import netns
from tests.support.fleet import Fleet


@pytest.fixture
def fleet(transactional_db, tmp_path):
    """fleet(hosts=3, database_delay=None): the running Fleet; all of it gone after the
    test."""
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    made = []

    def make(hosts: int = 3, database_delay=None) -> Fleet:
        made.append(Fleet(tmp_path, hosts, database_delay))
        return made[-1]

    yield make
    for fleet in made:
        fleet.stop()
