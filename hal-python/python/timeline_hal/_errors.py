"""The exceptions of timeline_hal: one class per HAL status code, all subclasses of HalError."""

from typing import Dict, Optional, Type


class HalError(Exception):
    """A HAL call failed. ``code`` is the status name (``"INVALID_ARGUMENT"``, ``"CANCELLED"``,
    ...), ``message`` the HAL's message naming the object and the values."""

    code: str = "UNKNOWN"

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidArgumentError(HalError):
    """A value that can never be valid (a bad flag, a missing binding)."""

    code = "INVALID_ARGUMENT"


class OutOfRangeError(HalError):
    """A value outside a valid range (a buffer range, a queue index)."""

    code = "OUT_OF_RANGE"


class FailedPreconditionError(HalError):
    """The object is in the wrong state for the call (recording after end, signalling backwards)."""

    code = "FAILED_PRECONDITION"


class DeadlineExceededError(HalError, TimeoutError):
    """A wait's deadline passed before the condition held."""

    code = "DEADLINE_EXCEEDED"


class AbortedError(HalError):
    """The work was aborted (a device fault, a failed dependency, a host call that raised)."""

    code = "ABORTED"


class CancelledError(HalError):
    """The work was cancelled by the user or by teardown (a device dropped with work pending)."""

    code = "CANCELLED"


class ResourceExhaustedError(HalError):
    """Out of memory or of another bounded resource."""

    code = "RESOURCE_EXHAUSTED"


class UnavailableError(HalError):
    """The driver, device or library is not there (no GPU, no libcuda, an unknown driver)."""

    code = "UNAVAILABLE"


class UnimplementedError(HalError):
    """The driver does not implement this operation or format."""

    code = "UNIMPLEMENTED"


class InternalError(HalError):
    """A bug or broken invariant inside the HAL or a driver."""

    code = "INTERNAL"


class DataLossError(HalError):
    """A kernel faulted and what it wrote cannot be trusted."""

    code = "DATA_LOSS"


class NotFoundError(HalError):
    """A named thing (an entry point, a symbol, a device id) was not found."""

    code = "NOT_FOUND"


class PermissionDeniedError(HalError):
    """The operation is not allowed on this object (mapping a device-only buffer)."""

    code = "PERMISSION_DENIED"


#: The exception class of each status name.
BY_CODE: Dict[str, Type[HalError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        OutOfRangeError,
        FailedPreconditionError,
        DeadlineExceededError,
        AbortedError,
        CancelledError,
        ResourceExhaustedError,
        UnavailableError,
        UnimplementedError,
        InternalError,
        DataLossError,
        NotFoundError,
        PermissionDeniedError,
    )
}


def error(code: str, message: str) -> HalError:
    """The exception for a HAL status: the class of ``code`` (HalError itself for an unknown one)."""
    return BY_CODE.get(code, HalError)(message, code)
