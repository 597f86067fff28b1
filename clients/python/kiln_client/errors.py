"""Errors raised by the kiln client."""

from __future__ import annotations

from typing import Any


class KilnError(Exception):
    """The server refused a request (a status other than the expected 2xx), or
    could not be reached. Subclasses name the common cases: BadRequest (400),
    NotFound (404), SessionBusy (409), SessionGone (410), PayloadTooLarge (413),
    KilnConnectionError (no answer).

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
        return (f"{type(self).__name__}(status_code={self.status_code!r}, code={self.code!r}, "
                f"message={self.message!r}, field={self.field!r}, retry_after={self.retry_after!r})")


class KilnConnectionError(KilnError):
    """The server could not be reached, or the connection broke before an answer
    (status_code is None, code "connection_error" or "timeout")."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(None, code, message)


class BadRequest(KilnError):
    """400: a field of the request is invalid (`field` names it), e.g. a file path
    with "..", a leading "/" or a NUL byte (field "path")."""


class NotFound(KilnError):
    """404: no such session (or one of another tenant), or no such workspace file."""


class SessionBusy(KilnError):
    """409 "session_busy": another cell or file operation of the session is
    running; cells of one session run one at a time. Nothing ran: try again later."""


class SessionGone(KilnError):
    """410 "session_gone": the session was deleted, reaped (idle or too old) or
    killed (e.g. its interpreter exited or ran out of memory); `message` says why.
    Its state is lost: create a new session."""


class PayloadTooLarge(KilnError):
    """413: the body is over the server's limit (server.max_body), or an uploaded
    file over the per-file cap (server.max_file)."""


# The reference endpoint's {"detail": "..."} answers carry no code: name them by status.
_REFERENCE_CODES = {401: "unauthenticated", 408: "timeout", 429: "rate_limited", 503: "unavailable"}


_CLASS_BY_CODE: dict[str, type[KilnError]] = {
    "session_busy": SessionBusy, "session_gone": SessionGone, "not_found": NotFound}
_CLASS_BY_STATUS: dict[int, type[KilnError]] = {
    400: BadRequest, 404: NotFound, 410: SessionGone, 413: PayloadTooLarge}
# For an error reported inside an event stream (its HTTP status was 200): the
# status the same request would have had without streaming.
_STATUS_BY_CODE = {"session_busy": 409, "session_gone": 410, "not_found": 404, "invalid_value": 400,
                   "unauthenticated": 401, "too_large": 413, "body_too_large": 413,
                   "session_limit": 429, "rate": 429, "tenant_concurrency": 429,
                   "unavailable": 503, "queue_full": 503, "queue_timeout": 503,
                   "shutting_down": 503, "server_full": 503}


def error_class(status: int | None, code: str) -> type[KilnError]:
    """The KilnError subclass for an answer: by code first ("session_busy" is a
    409 but not every 409 is), then by status."""
    if code in _CLASS_BY_CODE:
        return _CLASS_BY_CODE[code]
    return _CLASS_BY_STATUS.get(status or 0, KilnError)


def error_from_response(status: int, body: Any, retry_after: float | None) -> KilnError:
    """Builds a KilnError (of the subclass for its status and code) from a
    non-2xx answer of either API:
    /v1/*:     {"error": {"code", "message", "field"}}
    /execute:  {"detail": "..."} or {"detail": [{"loc": ["body", field], "msg", "type"}]}
    """
    code, message, field = f"http_{status}", "", None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code, message, field = _v1_error_fields(body["error"], code)
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
    cls = error_class(status, code)
    return cls(status, code, message or f"HTTP {status}", field, retry_after, body)


def error_from_stream(body: dict[str, Any]) -> KilnError:
    """The KilnError for an {"error": {...}} body sent as an event stream's "done"
    event (the request failed after the stream began, so the HTTP status was 200).
    status_code is the status the request would have had without streaming,
    inferred from the code (500 when the code is not a known one)."""
    code, message, field = _v1_error_fields(body.get("error") or {}, "stream_error")
    status = _STATUS_BY_CODE.get(code, 500)
    return error_class(status, code)(status, code, message or code, field, None, body)


def _v1_error_fields(e: dict[str, Any], default_code: str) -> tuple[str, str, str | None]:
    code = str(e.get("code") or default_code)
    message = str(e.get("message") or "")
    field = e.get("field") if isinstance(e.get("field"), str) else None
    return code, message, field
