"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}`` with an HTTP status."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """An error the client gets as an OpenAI error object."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


class BackendError(APIError):
    """The backend failed. ``retryable``: safe to try again (nothing was generated yet)."""

    def __init__(self, status: int, message: str, *, retryable: bool = False, code: str | None = None,
                 kind: str = "error") -> None:
        type_ = "invalid_request_error" if status == 400 else "server_error"
        super().__init__(status, message, type_, None, code)
        self.retryable = retryable
        self.kind = kind
