"""ktune.Error and its subclasses: one per gRPC status code a ktuned call can end with.

Every exception the client raises for a failed call is a ktune.Error carrying the gRPC code
(`.code`, a grpc.StatusCode) and the daemon's message unchanged (`.message`), e.g.
InvalidArgumentError("shape: missing dim 'hidden'").
"""

import grpc


class Error(Exception):
    """A ktuned call did not do what was asked. `code` is a grpc.StatusCode."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.code.name}: {self.message}"


class CancelledError(Error):
    code = grpc.StatusCode.CANCELLED


class UnknownError(Error):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgumentError(Error):
    """Bad input; the message names the field ("shape: missing dim 'hidden'")."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(Error):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(Error):
    """A CACHE_ONLY miss or an unknown template."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(Error):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(Error):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(Error):
    """The daemon's tuning queue is full (or a message is over the size limit)."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(Error):
    """Tuning asked of a daemon without a usable GPU (lookups still work)."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(Error):
    code = grpc.StatusCode.ABORTED


class OutOfRangeError(Error):
    code = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(Error):
    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(Error):
    code = grpc.StatusCode.INTERNAL


class UnavailableError(Error):
    """The daemon cannot be reached (not running, wrong socket) or is shutting down."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLossError(Error):
    """Corrupted data, e.g. a cubin whose sha256 is not the one the artifact states."""
    code = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(Error):
    """The daemon wants a bearer token and the call had none or another."""
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {cls.code: cls for cls in (
    CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
    AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError,
    FailedPreconditionError, AbortedError, OutOfRangeError, UnimplementedError,
    InternalError, UnavailableError, DataLossError, UnauthenticatedError)}


def from_rpc_error(e):
    """The ktune.Error for a grpc.RpcError raised by a call (code and details kept)."""
    code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
    details = e.details() if callable(getattr(e, "details", None)) else None
    cls = _BY_CODE.get(code, Error)
    return cls(details if details is not None else str(e), code=code)


def error_for_code(code, message):
    """The ktune.Error for a status code given as its number (a KernelResult's `code`)."""
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return _BY_CODE.get(status, Error)(message, code=status)
    return UnknownError(f"{message} (status code {code})")
