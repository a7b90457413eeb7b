"""A lease keeper for `execute_run(..., leases=...)` that keeps nothing: no renewer thread
beside the run. The session still renews its lease itself before each effect when it is
about to run out (`ensure_lease`); a test that wants no renewal at all gives the run a
lease longer than the test."""


class NoLeases:
    def hold(self, session) -> None:
        """Nothing to start."""

    def drop(self, session) -> None:
        """Nothing to stop."""
