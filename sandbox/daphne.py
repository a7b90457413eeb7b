"""`python -m sandbox.daphne ARGS`: Daphne's own command line, with the same arguments
(the Procfile's web process), whose access log leaves out the sandbox's requests unless
AGENTOPS_SANDBOX_ACCESS_LOG=1 (sandbox/logs.py says why). Without a sandbox mounted (a
deployment) it is plain Daphne."""

from __future__ import annotations

from daphne.cli import CommandLineInterface
from daphne.server import Server

from sandbox.logs import access_log_on, is_sandbox_path


def without_sandbox(action_logger):
    """Daphne's action logger (its access log), called for everything but the sandbox."""

    def log(protocol, action, details):
        if not is_sandbox_path(str(details.get("path", ""))):
            action_logger(protocol, action, details)

    return log


class QuietSandboxServer(Server):
    def __init__(self, *args, action_logger=None, **kwargs):
        if action_logger is not None and not access_log_on():
            action_logger = without_sandbox(action_logger)
        super().__init__(*args, action_logger=action_logger, **kwargs)


class CommandLine(CommandLineInterface):
    server_class = QuietSandboxServer


if __name__ == "__main__":
    CommandLine.entrypoint()
