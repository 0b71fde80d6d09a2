# kvtier's exceptions: one class per absl status code, all under kvtier.Error,
# raised by every call with the daemon's own message. The extension builds
# them through _from_status(), so the hierarchy lives in one place.


class Error(Exception):
    """A kvtier call failed. `.code` is the status code name ("UNAVAILABLE", ...),
    `.message` the daemon's (or the client's) message."""

    code = "UNKNOWN"

    def __init__(self, message="", code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"[{self.code}] {self.message}"


class Cancelled(Error):
    code = "CANCELLED"


class Unknown(Error):
    code = "UNKNOWN"


class InvalidArgument(Error, ValueError):
    code = "INVALID_ARGUMENT"


class DeadlineExceeded(Error):
    code = "DEADLINE_EXCEEDED"


class NotFound(Error):
    code = "NOT_FOUND"


class AlreadyExists(Error):
    code = "ALREADY_EXISTS"


class PermissionDenied(Error):
    code = "PERMISSION_DENIED"


class ResourceExhausted(Error):
    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(Error):
    code = "FAILED_PRECONDITION"


class Aborted(Error):
    code = "ABORTED"


class OutOfRange(Error):
    code = "OUT_OF_RANGE"


class Unimplemented(Error):
    code = "UNIMPLEMENTED"


class Internal(Error):
    code = "INTERNAL"


class Unavailable(Error):
    code = "UNAVAILABLE"


class DataLoss(Error):
    code = "DATA_LOSS"


class Unauthenticated(Error):
    code = "UNAUTHENTICATED"


# absl::StatusCode values (absl/status/status.h), in order.
_BY_CODE = {1: Cancelled, 2: Unknown, 3: InvalidArgument, 4: DeadlineExceeded, 5: NotFound,
            6: AlreadyExists, 7: PermissionDenied, 8: ResourceExhausted, 9: FailedPrecondition,
            10: Aborted, 11: OutOfRange, 12: Unimplemented, 13: Internal, 14: Unavailable,
            15: DataLoss, 16: Unauthenticated}

__all__ = ["Error"] + [c.__name__ for c in _BY_CODE.values()]


def _from_status(code, message):
    """The exception for an absl status code (the extension calls this)."""
    return _BY_CODE.get(code, Unknown)(message)
