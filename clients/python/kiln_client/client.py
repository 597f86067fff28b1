"""KilnClient: kiln's HTTP API from Python (docs/openapi.json)."""

from __future__ import annotations

import base64
import os
from typing import Any, Mapping

from ._transport import Transport
from .errors import KilnError
from .results import ExecutionResult
from .sessions import Session, SessionInfo
from .streaming import EventStream

DEFAULT_URL = "http://127.0.0.1:8080"
# The server's default execution timeout (30 s) plus its longest queue wait (30 s),
# with room to spare: the server says nothing while the code runs.
DEFAULT_TIMEOUT = 90.0


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


def _execute_payload(code: str, *, timeout: float | None, memory: str | int | None,
                     cpus: float | None, profile: str | None,
                     files: Mapping[str, str | bytes] | None, return_files: bool | list[str],
                     env: Mapping[str, str] | None, filename: str | None) -> dict[str, Any]:
    """The JSON body of POST /v1/execute: only the fields given."""
    payload: dict[str, Any] = {"code": code}
    for name, value in (("timeout", timeout), ("memory", memory), ("cpus", cpus),
                        ("profile", profile), ("filename", filename)):
        if value is not None:
            payload[name] = value
    if files:
        payload["files"] = _file_entries(files)
    if return_files:
        payload["return_files"] = True if return_files is True else list(return_files)
    if env:
        payload["env"] = dict(env)
    return payload


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

    Stateful work: create_session() gives a Session whose cells share one
    interpreter and workspace. Streaming: execute_stream() and Session.stream()
    return the events as the code runs.
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
        payload = _execute_payload(code, timeout=timeout, memory=memory, cpus=cpus, profile=profile,
                                   files=files, return_files=return_files, env=env, filename=filename)
        resp = self._http.request("POST", "/v1/execute", payload, timeout=self._http.wait_for(timeout))
        if not isinstance(resp.body, dict):
            raise KilnError(resp.status, "invalid_response", "the answer is not a JSON object", body=resp.body)
        return ExecutionResult.from_json(resp.body)

    def execute_stream(self, code: str, *, timeout: float | None = None,
                       memory: str | int | None = None, cpus: float | None = None,
                       profile: str | None = None, files: Mapping[str, str | bytes] | None = None,
                       return_files: bool | list[str] = False,
                       env: Mapping[str, str] | None = None,
                       filename: str | None = None) -> EventStream:
        """execute(), streamed: returns the events as the code produces them,
        ending with ("done", ExecutionResult). Same arguments as execute(); a
        refusal before the code starts raises here, see EventStream for the rest.

            for name, data in client.execute_stream("print('hi')"):
                print(name, data)
        """
        payload = _execute_payload(code, timeout=timeout, memory=memory, cpus=cpus, profile=profile,
                                   files=files, return_files=return_files, env=env, filename=filename)
        return EventStream(self._http.open_stream("/v1/execute", payload,
                                                  timeout=self._http.wait_for(timeout)))

    # --- /v1/sessions --------------------------------------------------------------

    def create_session(self, *, profile: str | None = None, memory: str | int | None = None,
                       cpus: float | None = None, timeout: float | None = None,
                       idle_ttl: float | None = None,
                       max_lifetime: float | None = None) -> Session:
        """POST /v1/sessions: starts a stateful interpreter and returns its Session
        (a context manager that deletes it on exit).

        profile, memory, cpus: as for execute(), for the session's whole life.
        timeout: the default seconds per cell. idle_ttl: seconds unused before the
        server reaps it; max_lifetime: seconds in all (both capped by the server).
        Raises KilnError 429 "session_limit" when the tenant has its maximum of
        live sessions (never retried: delete one), 503 when the server has
        (retried with `retries`), BadRequest for a bad field or unknown profile.
        """
        payload: dict[str, Any] = {}
        for name, value in (("profile", profile), ("memory", memory), ("cpus", cpus),
                            ("timeout", timeout), ("idle_ttl", idle_ttl),
                            ("max_lifetime", max_lifetime)):
            if value is not None:
                payload[name] = value
        body = self._http.request("POST", "/v1/sessions", payload, ok=(200, 201)).body
        return self._session(body)

    def sessions(self) -> list[Session]:
        """GET /v1/sessions: this API key's tenant's live sessions, as Session
        objects (their last_info is the listing's description)."""
        body = self._http.request("GET", "/v1/sessions").body
        entries = body.get("sessions") if isinstance(body, dict) else None
        return [self._session(e) for e in entries or [] if isinstance(e, dict)]

    def get_session(self, session_id: str) -> Session:
        """GET /v1/sessions/{id}: a Session for an existing id (e.g. kept from an
        earlier process). Raises NotFound (unknown, or another tenant's) or
        SessionGone."""
        session = Session(self._http, SessionInfo(id=session_id))
        session.info()
        return session

    def _session(self, body: Any) -> Session:
        if not isinstance(body, dict) or not body.get("id"):
            raise KilnError(None, "invalid_response", "the answer is not a session object", body=body)
        return Session(self._http, SessionInfo.from_json(body))

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
                                  timeout=self._http.wait_for(timeout))
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
