"""The chaos suite: many runs, many faults of every kind, then an audit of the
database and of the outside world (see docs/RELIABILITY.md). Run it with
`python -m tests.chaos` or `make chaos`; tests/chaos/test_chaos_ci.py runs the
small seeded profile in the test suite."""
