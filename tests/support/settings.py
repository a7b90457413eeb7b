"""The settings of the test process and of every process a test starts (Daphne, a worker tree,
the CLI): the project's own, but for the password hasher.

PBKDF2 (the production algorithm) at one iteration: at the default's 870,000 one hash
costs about a second of CPU (five on a loaded machine), and the `users` fixture makes
three per test. Every process of a test uses the same one, so a login in Daphne does not
"upgrade" a hash the test process made (which would end that user's other sessions).
"""

import os

from agentops.settings import *  # noqa: F403

PASSWORD_HASHERS = ["tests.support.hashers.OneIterationPBKDF2"]

# Under pytest-xdist each worker is a test session of its own (its own test database,
# by pid): on a shared Redis its live wake-ups must not reach another worker's pages.
# The worker's processes (Daphne, a worker tree) inherit the prefix with the environment.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and REDIS_URL:  # noqa: F405
    _prefix = os.environ.get("AGENTOPS_CHANNEL_PREFIX", "asgi")
    if not _prefix.endswith(f"-{_worker}"):
        _prefix = f"{_prefix}-{_worker}"
        os.environ["AGENTOPS_CHANNEL_PREFIX"] = _prefix
    CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = _prefix  # noqa: F405
