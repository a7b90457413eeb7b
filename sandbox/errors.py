"""Errors the sandbox APIs answer with: each knows its HTTP status and code."""


class SandboxError(Exception):
    """An error answered as ``{"error": code, "detail": message, **fields}``."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, **fields):
        super().__init__(message)
        self.message = message
        self.fields = fields

    def as_body(self) -> dict:
        return {"error": self.code, "detail": self.message, **self.fields}


class MissingIdempotencyKey(SandboxError):
    code = "missing_idempotency_key"


class InvalidIdempotencyKey(SandboxError):
    code = "invalid_idempotency_key"


class InvalidBody(SandboxError):
    code = "invalid_body"


class InvalidParam(SandboxError):
    code = "invalid_param"


class IdempotencyKeyReused(SandboxError):
    """The key was first used with another request body (the draft's 422)."""

    status = 422
    code = "idempotency_key_reused"


class RequestInProgress(SandboxError):
    """The first request with this key is still being processed (the draft's 409)."""

    status = 409
    code = "request_in_progress"


class SimulatedFailure(SandboxError):
    """A failure the caller asked for with ``X-Sandbox-Fail``, to test its retries."""

    status = 503
    code = "simulated_failure"
