"""The settings of the test process and of every process a test starts (Daphne, qcluster,
the CLI): the project's own, but for the password hasher.

PBKDF2 (the production algorithm) at one iteration: at the default's 870,000 one hash
costs about a second of CPU (five on a loaded machine), and the `users` fixture makes
three per test. Every process of a test uses the same one, so a login in Daphne does not
"upgrade" a hash the test process made (which would end that user's other sessions).
"""

from agentops.settings import *  # noqa: F403

PASSWORD_HASHERS = ["tests.support.hashers.OneIterationPBKDF2"]
