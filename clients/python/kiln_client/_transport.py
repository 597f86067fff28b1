"""HTTP plumbing shared by every endpoint: JSON in and out, authentication,
error bodies, and retries on 429/503. Standard library only (urllib)."""

from __future__ import annotations

import email.utils
import ipaddress
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

from .errors import KilnConnectionError, KilnError, error_from_response

USER_AGENT = "kiln-client-python/0.1.0"
RETRYABLE = (429, 503)


@dataclass
class Response:
    status: int
    headers: Any  # http.client.HTTPMessage
    body: Any     # parsed JSON, or text when the body is not JSON


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
        host = urllib.parse.urlsplit(self.base_url).hostname
        # A proxy from the environment must not swallow requests to a local server.
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(host) else []
        self._opener = urllib.request.build_opener(*handlers)

    def request(self, method: str, path: str, payload: Any = None, *, auth: str = "bearer",
                timeout: float | None = None, ok: tuple[int, ...] = (200,)) -> Response:
        """Sends one request (retrying on 429/503 up to `retries` times, sleeping
        Retry-After each time) and returns the answer if its status is in `ok`;
        otherwise raises KilnError. auth: "bearer", "x-api-key" or "none"."""
        data = None
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if payload is not None:
            data = json.dumps(payload).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key and auth == "bearer":
            headers["Authorization"] = "Bearer " + self.api_key
        elif self.api_key and auth == "x-api-key":
            headers["X-API-Key"] = self.api_key
        attempt = 0
        while True:
            resp = self._once(method, path, data, headers, timeout or self.timeout)
            if resp.status in ok:
                return resp
            retry_after = _parse_retry_after(resp.headers.get("Retry-After") if resp.headers else None)
            err = error_from_response(resp.status, resp.body, retry_after)
            if resp.status in RETRYABLE and attempt < self.retries:
                attempt += 1
                wait = retry_after if retry_after is not None else min(2.0 ** attempt, 30.0)
                self._sleep(min(wait, self.max_retry_wait))
                continue
            raise err

    def _once(self, method: str, path: str, data: bytes | None, headers: dict[str, str],
              timeout: float) -> Response:
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=timeout) as r:
                return Response(r.status, r.headers, _decode(r.read(), r.headers))
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            except OSError:
                raw = b""
            return Response(e.code, e.headers, _decode(raw, e.headers))
        except (socket.timeout, TimeoutError) as e:
            raise KilnConnectionError("timeout", f"{method} {path}: no answer within {timeout:g} s ({e})") from e
        except urllib.error.URLError as e:
            raise KilnConnectionError("connection_error", f"{method} {self.base_url}{path}: {e.reason}") from e
        except (ConnectionError, OSError) as e:
            raise KilnConnectionError("connection_error", f"{method} {self.base_url}{path}: {e}") from e


def _decode(raw: bytes, headers: Any) -> Any:
    text = raw.decode("utf-8", "replace")
    ctype = (headers.get("Content-Type") or "") if headers else ""
    if "json" in ctype or text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


__all__ = ["Transport", "Response", "KilnError"]
