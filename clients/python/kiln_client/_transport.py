"""HTTP plumbing shared by every endpoint: JSON in and out, raw bytes, event
streams, authentication, error bodies, and retries on 429/503. Standard library
only: urllib for ordinary requests (it honours proxies for remote servers),
http.client for uploads and event streams (read incrementally)."""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .errors import KilnConnectionError, KilnError, error_from_response

USER_AGENT = "kiln-client-python/0.2.0"
RETRYABLE = (429, 503)
# 429s that waiting seconds does not clear: the tenant's live sessions (one must
# be deleted or idle out, minutes away).
NOT_RETRIED_CODES = frozenset({"session_limit"})
EVENT_STREAM = "text/event-stream"
# Extra seconds on top of an execution's own timeout for queueing and setup.
EXECUTION_SLACK = 35.0
_READ_SIZE = 64 * 1024


@dataclass
class Response:
    status: int
    headers: Any  # http.client.HTTPMessage
    body: Any     # parsed JSON, text when the body is not JSON, or bytes (raw=True)


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # the HTTP-date form
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _decode(raw: bytes, headers: Any) -> Any:
    text = raw.decode("utf-8", "replace")
    ctype = (headers.get("Content-Type") or "") if headers else ""
    if "json" in ctype or text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _error(status: int, headers: Any, raw: bytes) -> KilnError:
    retry_after = _parse_retry_after(headers.get("Retry-After") if headers else None)
    return error_from_response(status, _decode(raw, headers), retry_after)


class StreamingResponse:
    """An answer whose body is read as it arrives (an event stream, or any
    answer of a direct request). Iterate chunks() for its body bytes; close()
    drops the connection (for an event stream, the server then cancels the
    execution if it still runs)."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse,
                 sock: socket.socket | None = None) -> None:
        self._conn = conn
        self.response = response
        self._sock = sock
        self.headers = response.headers

    @property
    def is_event_stream(self) -> bool:
        return EVENT_STREAM in (self.headers.get("Content-Type") or "")

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives: each chunk is what one read returned (read1),
        so nothing waits for more data than the server has sent."""
        try:
            while True:
                data = self.response.read1(_READ_SIZE)
                if not data:
                    return
                yield data
        except (socket.timeout, TimeoutError) as e:
            raise KilnConnectionError("timeout", f"the event stream was silent too long ({e})") from e
        except (http.client.HTTPException, OSError) as e:
            raise KilnConnectionError("connection_error", f"the event stream broke: {e}") from e

    def read_all(self) -> bytes:
        return b"".join(self.chunks())

    def abort(self) -> None:
        """Shuts the connection down without closing it: safe from another thread
        while chunks() waits there (it wakes and ends with KilnConnectionError)."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Closes the connection (from the thread reading it, or when nobody is)."""
        self.abort()
        self.response.close()
        self._conn.close()


class Transport:
    """One server: base URL, key, timeouts and retry policy."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float,
                 retries: int, max_retry_wait: float,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.max_retry_wait = max_retry_wait
        self._sleep = sleep
        self._url = urllib.parse.urlsplit(self.base_url)
        if self._url.scheme not in ("http", "https") or not self._url.hostname:
            raise ValueError(f"base_url must be http://HOST[:PORT] or https://..., not {base_url!r}")
        # A proxy from the environment must not swallow requests to a local server.
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(self._url.hostname) else []
        self._opener = urllib.request.build_opener(*handlers)

    def wait_for(self, execution_timeout: float | None) -> float:
        """The HTTP timeout for an execution of `execution_timeout` seconds: the
        server may say nothing while the code runs, queueing included."""
        if execution_timeout is None:
            return self.timeout
        return max(self.timeout, float(execution_timeout) + EXECUTION_SLACK)

    # --- ordinary requests (urllib) -------------------------------------------

    def request(self, method: str, path: str, payload: Any = None, *, auth: str = "bearer",
                timeout: float | None = None, ok: tuple[int, ...] = (200,),
                raw: bool = False) -> Response:
        """Sends one request (retrying on 429/503 up to `retries` times, sleeping
        Retry-After each time) and returns the answer if its status is in `ok`;
        otherwise raises KilnError (or the subclass for its status).
        payload: a JSON value, or None for no body. auth: "bearer", "x-api-key"
        or "none". raw: the answer's body as bytes instead of parsed JSON."""
        data = None
        headers = self._headers(auth, accept="*/*" if raw else "application/json")
        if payload is not None:
            data = json.dumps(payload).encode("utf-8")
            headers["Content-Type"] = "application/json"
        attempt = 0
        while True:
            status, resp_headers, body = self._once(method, path, data, headers, timeout or self.timeout)
            if status in ok:
                return Response(status, resp_headers, body if raw else _decode(body, resp_headers))
            attempt = self._backoff_or_raise(_error(status, resp_headers, body), attempt)

    def _once(self, method: str, path: str, data: bytes | None, headers: dict[str, str],
              timeout: float) -> tuple[int, Any, bytes]:
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=timeout) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            except OSError:
                raw = b""
            return e.code, e.headers, raw
        except (socket.timeout, TimeoutError) as e:
            raise KilnConnectionError("timeout", f"{method} {path}: no answer within {timeout:g} s ({e})") from e
        except urllib.error.URLError as e:
            raise KilnConnectionError("connection_error", f"{method} {self.base_url}{path}: {e.reason}") from e
        except (ConnectionError, OSError) as e:
            raise KilnConnectionError("connection_error", f"{method} {self.base_url}{path}: {e}") from e

    # --- direct requests (http.client): uploads and event streams --------------

    def send_bytes(self, method: str, path: str, data: bytes, *, timeout: float | None = None,
                   ok: tuple[int, ...] = (200,)) -> Response:
        """Sends `data` as an application/octet-stream body; the JSON answer as
        for request(). A server that refuses a large body (413) may close the
        connection before reading it all: its answer is still read and raised."""
        headers = self._headers("bearer", accept="application/json")
        headers["Content-Type"] = "application/octet-stream"
        answer = self._direct(method, path, data, headers, timeout or self.timeout, ok)
        try:
            body = answer.read_all()
        finally:
            answer.close()
        return Response(answer.response.status, answer.headers, _decode(body, answer.headers))

    def open_stream(self, path: str, payload: Any, *, timeout: float | None = None) -> StreamingResponse:
        """POSTs `payload` asking for Server-Sent Events and returns the open 200
        answer (the caller closes it). An answer other than 200 (refused before
        anything ran) is retried on 429/503 like request(), else raised."""
        headers = self._headers("bearer", accept=EVENT_STREAM)
        headers["Content-Type"] = "application/json"
        data = json.dumps(payload).encode("utf-8")
        return self._direct("POST", path, data, headers, timeout or self.timeout, (200,))

    def _direct(self, method: str, path: str, data: bytes, headers: dict[str, str], timeout: float,
                ok: tuple[int, ...]) -> StreamingResponse:
        """One request over http.client, retried like request(); returns the
        answer with a status in `ok`, its body not read yet."""
        attempt = 0
        while True:
            answer = StreamingResponse(*self._open(method, path, data, headers, timeout))
            status = answer.response.status
            if status in ok:
                return answer
            try:
                body = answer.read_all()
            finally:
                answer.close()
            attempt = self._backoff_or_raise(_error(status, answer.headers, body), attempt)

    def _open(self, method: str, path: str, data: bytes, headers: dict[str, str],
              timeout: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse,
                                       socket.socket | None]:
        """Connects, sends, and reads the status line and headers. Also returns
        the socket: getresponse() forgets it when the server closes after the
        answer, and close() needs it to wake a reader in another thread."""
        conn = self._connection(timeout)
        target = (self._url.path or "") + path
        try:
            conn.connect()
            sock = conn.sock
            try:
                conn.request(method, target, body=data, headers=headers)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered early and closed; its answer may be waiting
            return conn, conn.getresponse(), sock
        except (socket.timeout, TimeoutError) as e:
            conn.close()
            raise KilnConnectionError("timeout", f"{method} {path}: no answer within {timeout:g} s ({e})") from e
        except (http.client.HTTPException, OSError) as e:
            conn.close()
            raise KilnConnectionError("connection_error", f"{method} {self.base_url}{path}: {e}") from e

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._url.scheme == "https":
            return http.client.HTTPSConnection(self._url.hostname, self._url.port, timeout=timeout)
        return http.client.HTTPConnection(self._url.hostname, self._url.port, timeout=timeout)

    # --- shared -----------------------------------------------------------------

    def _headers(self, auth: str, *, accept: str) -> dict[str, str]:
        headers = {"User-Agent": USER_AGENT, "Accept": accept}
        if self.api_key and auth == "bearer":
            headers["Authorization"] = "Bearer " + self.api_key
        elif self.api_key and auth == "x-api-key":
            headers["X-API-Key"] = self.api_key
        return headers

    def _backoff_or_raise(self, err: KilnError, attempt: int) -> int:
        """Sleeps before the next attempt and returns its number, or raises `err`
        when it is not retryable (only 429 and 503: the server ran nothing; not
        "session_limit") or the retries are used up."""
        if err.status_code not in RETRYABLE or err.code in NOT_RETRIED_CODES or attempt >= self.retries:
            raise err
        attempt += 1
        wait = err.retry_after if err.retry_after is not None else min(2.0 ** attempt, 30.0)
        self._sleep(min(wait, self.max_retry_wait))
        return attempt


__all__ = ["Transport", "Response", "StreamingResponse", "KilnError"]
