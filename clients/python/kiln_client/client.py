"""KilnClient: kiln's HTTP API from Python (docs/openapi.json)."""

from __future__ import annotations

import base64
import os
from typing import Any, Mapping

from ._transport import Transport
from .errors import KilnError
from .results import ExecutionResult

DEFAULT_URL = "http://127.0.0.1:8080"
# The server's default execution timeout (30 s) plus its longest queue wait (30 s),
# with room to spare: the server says nothing while the code runs.
DEFAULT_TIMEOUT = 90.0
# Extra seconds on top of an execution's own timeout for queueing and setup.
_SLACK = 35.0


def _file_entries(files: Mapping[str, str | bytes | bytearray | memoryview]) -> list[dict[str, str]]:
    out = []
    for path, content in files.items():
        if isinstance(content, str):
            out.append({"path": path, "content": content})
        elif isinstance(content, (bytes, bytearray, memoryview)):
            out.append({"path": path, "content_base64": base64.b64encode(bytes(content)).decode("ascii")})
        else:
            raise TypeError(f"files[{path!r}]: expected str or bytes, not {type(content).__name__}")
    return out


class KilnClient:
    """A client for one kiln server.

        client = KilnClient("http://127.0.0.1:8080", api_key="...")
        r = client.execute("print(6 * 7)")
        r.stdout  # '42\\n'

    api_key defaults to $KILN_API_KEY. `timeout` is the HTTP timeout in seconds;
    an execute() with a longer execution timeout waits that long plus queueing time.
    `retries` > 0 retries answers 429 (tenant quota) and 503 (server full), sleeping
    Retry-After (at most `max_retry_wait` seconds) between attempts: those
    requests ran nothing, so repeating them is safe.
    """

    def __init__(self, base_url: str = DEFAULT_URL, api_key: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT, retries: int = 0,
                 max_retry_wait: float = 60.0) -> None:
        if api_key is None:
            api_key = os.environ.get("KILN_API_KEY") or None
        self._http = Transport(base_url, api_key, timeout, retries, max_retry_wait)

    @property
    def base_url(self) -> str:
        return self._http.base_url

    def __repr__(self) -> str:
        return f"KilnClient({self.base_url!r})"

    # --- POST /v1/execute ------------------------------------------------------

    def execute(self, code: str, *, timeout: float | None = None, memory: str | int | None = None,
                cpus: float | None = None, profile: str | None = None,
                files: Mapping[str, str | bytes] | None = None,
                return_files: bool | list[str] = False,
                env: Mapping[str, str] | None = None,
                filename: str | None = None) -> ExecutionResult:
        """Runs `code` in a fresh, single-use sandbox and returns what it did.

        timeout: seconds of wall clock (default: the profile's, 30 s by default).
        memory: "512m", "1G" or bytes. cpus: cores (e.g. 0.5). profile: a server
        profile name ("default", "strict", "datascience", ...).
        files: {relative path: str | bytes} put into /workspace before the code runs.
        return_files: True for every workspace file afterwards, or a list of globs;
        they come back in result.files as {path: bytes}.
        env: extra environment variables. filename: shown in tracebacks.

        A program that fails (exception, timeout, OOM, ...) is a normal result with
        a non-"ok" status; KilnError is raised only when the server refuses the
        request (bad key 401, invalid field 400, quota 429, full 503, ...).
        """
        payload: dict[str, Any] = {"code": code}
        if timeout is not None:
            payload["timeout"] = timeout
        if memory is not None:
            payload["memory"] = memory
        if cpus is not None:
            payload["cpus"] = cpus
        if profile is not None:
            payload["profile"] = profile
        if files:
            payload["files"] = _file_entries(files)
        if return_files:
            payload["return_files"] = True if return_files is True else list(return_files)
        if env:
            payload["env"] = dict(env)
        if filename is not None:
            payload["filename"] = filename
        resp = self._http.request("POST", "/v1/execute", payload, timeout=self._wait_for(timeout))
        if not isinstance(resp.body, dict):
            raise KilnError(resp.status, "invalid_response", "the answer is not a JSON object", body=resp.body)
        return ExecutionResult.from_json(resp.body)

    # --- POST /execute (the reference design's endpoint) -----------------------

    def reference_execute(self, code: str, *, timeout: float | None = None,
                          mem_limit: str | None = None, cpu_limit: float | None = None,
                          input_files: Mapping[str, str] | None = None,
                          return_output_files: bool = False) -> dict[str, Any]:
        """POST /execute, the reference design's contract, for code written against it.
        Returns its body unchanged: {task_id, stdout, stderr, exit_code,
        execution_time, output_files}. Its errors (401, 408 timeout, 422, 429, 503)
        raise KilnError (for 422, field names the field)."""
        payload: dict[str, Any] = {"code": code}
        if timeout is not None:
            payload["timeout"] = timeout
        if mem_limit is not None:
            payload["mem_limit"] = mem_limit
        if cpu_limit is not None:
            payload["cpu_limit"] = cpu_limit
        if input_files is not None:
            payload["input_files"] = dict(input_files)
        if return_output_files:
            payload["return_output_files"] = True
        resp = self._http.request("POST", "/execute", payload, auth="x-api-key",
                                  timeout=self._wait_for(timeout))
        return resp.body

    # --- health ------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """GET /healthz: {"status": "ok"} while the process is up (else KilnError)."""
        return self._http.request("GET", "/healthz", auth="none").body

    def readiness(self) -> dict[str, Any]:
        """GET /readyz's body, 200 or 503 alike: {"ready": bool, "layers": [...], ...}."""
        return self._http.request("GET", "/readyz", auth="none", ok=(200, 503)).body

    def ready(self) -> bool:
        """True when the server can run sandboxes now (GET /readyz answers 200)."""
        body = self.readiness()
        return isinstance(body, dict) and body.get("ready") is True

    # --- internals -----------------------------------------------------------------

    def _wait_for(self, execution_timeout: float | None) -> float:
        if execution_timeout is None:
            return self._http.timeout
        return max(self._http.timeout, float(execution_timeout) + _SLACK)
