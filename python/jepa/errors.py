"""The jepa error hierarchy. The engine's status codes map onto these classes one to one, and the
server maps each class to an HTTP status (never by matching a message)."""

from __future__ import annotations


class JepaError(Exception):
    """Any error jepa reports. ``status`` is the engine's status code (0 when raised in Python);
    ``param`` names the refused argument ("pixels", "actions", "state", "goal", ...; None when the
    error is not one argument's), so a caller maps the refusal to its own field by name, never by
    reading the message."""

    status: int = 0

    def __init__(self, message: str, status: int | None = None, *, param: str | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.param = param

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidInputError(JepaError, ValueError):
    """The input is wrong: a shape, a dtype, a value, an image that cannot be decoded."""

    status = 1


class ModelFileError(JepaError):
    """The model file is missing, truncated, forged or does not follow the schema."""

    status = 2


class UnsupportedError(JepaError):
    """Valid, but something this build or this model cannot do."""

    status = 3


class ResourceLimitError(JepaError):
    """Out of memory, or over a configured limit."""

    status = 4


class BackendError(JepaError):
    """The compute backend failed."""

    status = 5


_BY_STATUS: dict[int, type[JepaError]] = {
    cls.status: cls
    for cls in (InvalidInputError, ModelFileError, UnsupportedError, ResourceLimitError, BackendError)
}


def error_for_status(status: int, message: str, param: str = "") -> JepaError:
    """The exception for an engine status code and refused argument (used by the native module)."""
    return _BY_STATUS.get(status, JepaError)(message, status, param=param or None)
