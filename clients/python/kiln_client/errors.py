"""Errors raised by the kiln client."""

from __future__ import annotations

from typing import Any


class KilnError(Exception):
    """The server answered with a status other than 200, or could not be reached.

    Attributes:
        status_code: the HTTP status (401, 400, 429, 503, ...); None if no answer came.
        code: the machine-readable reason, e.g. "unauthenticated", "invalid_value",
            "rate", "queue_full" (from the {"error": {"code": ...}} body).
        message: the human-readable message.
        field: the request field at fault (e.g. "files[0].path"), or None.
        retry_after: seconds from the Retry-After header (429/503), or None.
        body: the parsed JSON body (or the raw text), for anything not above.
    """

    def __init__(self, status_code: int | None, code: str, message: str,
                 field: str | None = None, retry_after: float | None = None,
                 body: Any = None) -> None:
        self.status_code = status_code
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.body = body
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"HTTP {self.status_code}" if self.status_code is not None else "no answer"
        field = f" [{self.field}]" if self.field else ""
        return f"{where} {self.code}{field}: {self.message}"

    def __repr__(self) -> str:
        return (f"KilnError(status_code={self.status_code!r}, code={self.code!r}, "
                f"message={self.message!r}, field={self.field!r}, retry_after={self.retry_after!r})")


class KilnConnectionError(KilnError):
    """The server could not be reached, or the connection broke before an answer
    (status_code is None, code "connection_error" or "timeout")."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(None, code, message)


# The reference endpoint's {"detail": "..."} answers carry no code: name them by status.
_REFERENCE_CODES = {401: "unauthenticated", 408: "timeout", 429: "rate_limited", 503: "unavailable"}


def error_from_response(status: int, body: Any, retry_after: float | None) -> KilnError:
    """Builds a KilnError from a non-200 answer of either API:
    /v1/*:     {"error": {"code", "message", "field"}}
    /execute:  {"detail": "..."} or {"detail": [{"loc": ["body", field], "msg", "type"}]}
    """
    code, message, field = f"http_{status}", "", None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        e = body["error"]
        code = str(e.get("code") or code)
        message = str(e.get("message") or "")
        field = e.get("field") if isinstance(e.get("field"), str) else None
    elif isinstance(body, dict) and "detail" in body:
        detail = body["detail"]
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            first = detail[0]
            loc = first.get("loc") or []
            if isinstance(loc, list) and len(loc) > 1:
                field = ".".join(str(x) for x in loc[1:])
            code = str(first.get("type") or code)
            message = str(first.get("msg") or "")
        else:
            message = str(detail)
            code = _REFERENCE_CODES.get(status, code)
    elif isinstance(body, str):
        message = body.strip()[:1000]
    return KilnError(status, code, message or f"HTTP {status}", field, retry_after, body)
