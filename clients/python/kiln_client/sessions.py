"""Sessions: a long-lived interpreter on the server whose variables, imports and
workspace files carry over from one cell to the next (/v1/sessions)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, BinaryIO, Union

from ._transport import Transport
from .errors import KilnError, NotFound, SessionGone
from .results import ExecutionResult
from .streaming import EventStream

FileContent = Union[bytes, bytearray, memoryview, BinaryIO]


def _timestamp(value: Any) -> datetime | None:
    """"2026-11-30T11:07:01.670Z" -> an aware datetime (UTC); None if absent or malformed."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _number(value: Any, default: float = 0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


@dataclass(frozen=True)
class SessionInfo:
    """A session as the server describes it (POST/GET /v1/sessions...).

    state: "idle" or "busy" (a cell or file operation runs). timeout: the
    per-cell default timeout in seconds; idle_ttl / max_lifetime: seconds
    after which the server reaps it (unused / in all); expires_at: when it will,
    if unused until then. limits: the sandbox limits (timeout_s, cpus,
    memory_bytes, ...). memory_bytes: its current memory use, as the server
    reports it. raw: the whole JSON object.
    """

    id: str
    profile: str = ""
    state: str = ""
    created_at: datetime | None = None
    last_used_at: datetime | None = None
    expires_at: datetime | None = None
    executions: int = 0
    idle_ttl: float = 0.0
    max_lifetime: float = 0.0
    timeout: float = 0.0
    limits: dict[str, Any] = field(default_factory=dict)
    memory_bytes: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "SessionInfo":
        memory = body.get("memory_bytes")
        return cls(
            id=str(body.get("id") or ""),
            profile=str(body.get("profile") or ""),
            state=str(body.get("state") or ""),
            created_at=_timestamp(body.get("created_at")),
            last_used_at=_timestamp(body.get("last_used_at")),
            expires_at=_timestamp(body.get("expires_at")),
            executions=int(_number(body.get("executions"))),
            idle_ttl=_number(body.get("idle_ttl")),
            max_lifetime=_number(body.get("max_lifetime")),
            timeout=_number(body.get("timeout")),
            limits=dict(body.get("limits") or {}),
            memory_bytes=int(memory) if isinstance(memory, int) else None,
            raw=body,
        )


@dataclass(frozen=True)
class WorkspaceFile:
    """One entry of a session's workspace: path relative to /workspace, size in
    bytes, and whether it is a directory."""

    path: str
    size: int
    directory: bool = False

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "WorkspaceFile":
        return cls(path=str(body.get("path") or ""), size=int(_number(body.get("size"))),
                   directory=bool(body.get("directory", False)))


def _content_bytes(content: FileContent) -> bytes:
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content)
    if isinstance(content, str):
        raise TypeError("upload() takes bytes or a binary file, not str: use text.encode() "
                        "or open(path, 'rb')")
    read = getattr(content, "read", None)
    if read is None:
        raise TypeError(f"upload() takes bytes or a binary file, not {type(content).__name__}")
    data = read()
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError("upload() needs a file opened in binary mode ('rb')")
    return bytes(data)


class Session:
    """A live interpreter on the server (KilnClient.create_session()): each
    execute() is a notebook cell in the same process, so variables, imports and
    files in /workspace carry over. Cells of one session run one at a time.

        with client.create_session(profile="datascience") as s:
            s.execute("import pandas as pd; df = pd.DataFrame({'a': [1, 2]})")
            s.execute("df.a.sum()").result_text          # '3'
        # leaving the block deletes the session

    The server reaps a session unused for idle_ttl seconds or older than
    max_lifetime, and one whose cell killed the interpreter (exit, out of
    memory, ...): calls then raise SessionGone. A call while another cell or
    file operation of the session runs raises SessionBusy (nothing is retried
    automatically: the code may not be safe to run twice).

    One Session may be used from several threads, e.g. interrupt() from one
    while another waits in execute().
    """

    def __init__(self, transport: Transport, info: SessionInfo) -> None:
        if not info.id:
            raise ValueError("a session needs an id")
        self._http = transport
        self._info = info
        self._base = "/v1/sessions/" + urllib.parse.quote(info.id, safe="")

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def last_info(self) -> SessionInfo:
        """The description last received (at creation, listing or info()), without a request."""
        return self._info

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, profile={self._info.profile!r})"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.delete(missing_ok=True)
        except KilnError:
            if exc_type is None:
                raise
            # The block's own exception matters more; the server reaps the session anyway.

    # --- the session itself ---------------------------------------------------

    def info(self) -> SessionInfo:
        """GET /v1/sessions/{id}: the session now (state, executions, expires_at, ...)."""
        self._info = SessionInfo.from_json(self._http.request("GET", self._base).body)
        return self._info

    def delete(self, *, missing_ok: bool = False) -> None:
        """DELETE /v1/sessions/{id}: ends the interpreter and discards its workspace.
        missing_ok: do not raise when it is already gone (SessionGone, NotFound)."""
        try:
            self._http.request("DELETE", self._base, ok=(204,))
        except (SessionGone, NotFound):
            if not missing_ok:
                raise

    def interrupt(self) -> bool:
        """POST /v1/sessions/{id}/interrupt: raises KeyboardInterrupt in the running
        cell (which then ends with status "interrupted", the session's state
        kept). Returns whether a cell was running."""
        body = self._http.request("POST", self._base + "/interrupt", {}).body
        return bool(isinstance(body, dict) and body.get("interrupted"))

    # --- cells --------------------------------------------------------------------

    def execute(self, code: str, timeout: float | None = None) -> ExecutionResult:
        """Runs `code` as the session's next cell and returns what it did, like
        KilnClient.execute(), plus session_state ("kept" or "lost") and
        execution_count. timeout: seconds for this cell (default: the session's).
        Raises SessionBusy (another cell runs), SessionGone, NotFound."""
        resp = self._http.request("POST", self._base + "/execute", self._cell(code, timeout),
                                  timeout=self._wait_for(timeout))
        if not isinstance(resp.body, dict):
            raise KilnError(resp.status, "invalid_response", "the answer is not a JSON object", body=resp.body)
        return ExecutionResult.from_json(resp.body)

    def stream(self, code: str, timeout: float | None = None) -> EventStream:
        """Runs `code` as the next cell and returns its events as they happen:
        ("stdout", {"text"}), ("stderr", {"text"}), ("display", output),
        ("result", output), ("error", output), and last ("done", ExecutionResult).
        A refusal before the cell starts (SessionBusy, SessionGone, NotFound, 400,
        ...) is raised here; see EventStream for the rest."""
        response = self._http.open_stream(self._base + "/execute", self._cell(code, timeout),
                                          timeout=self._wait_for(timeout))
        return EventStream(response)

    def _cell(self, code: str, timeout: float | None) -> dict[str, Any]:
        payload: dict[str, Any] = {"code": code}
        if timeout is not None:
            payload["timeout"] = timeout
        return payload

    def _wait_for(self, timeout: float | None) -> float:
        return self._http.wait_for(timeout if timeout is not None else (self._info.timeout or None))

    # --- workspace files --------------------------------------------------------

    def upload(self, path: str, content: FileContent) -> WorkspaceFile:
        """PUT /v1/sessions/{id}/files/{path}: writes bytes (or a binary file's
        contents) to /workspace/{path}, creating directories; replaces a file
        there. Raises BadRequest for a path with "..", a leading "/" or NUL,
        PayloadTooLarge over the server's cap, SessionBusy while a cell runs."""
        body = self._http.send_bytes("PUT", self._file_url(path), _content_bytes(content),
                                     ok=(200, 201)).body
        return WorkspaceFile.from_json(body if isinstance(body, dict) else {"path": path})

    def download(self, path: str) -> bytes:
        """GET /v1/sessions/{id}/files/{path}: the file's bytes (NotFound if missing)."""
        return self._http.request("GET", self._file_url(path), raw=True).body

    def list_files(self) -> list[WorkspaceFile]:
        """GET /v1/sessions/{id}/files: every file and directory under /workspace."""
        body = self._http.request("GET", self._base + "/files").body
        entries = body.get("files") if isinstance(body, dict) else None
        return [WorkspaceFile.from_json(e) for e in entries or [] if isinstance(e, dict)]

    def delete_file(self, path: str) -> None:
        """DELETE /v1/sessions/{id}/files/{path} (NotFound if missing)."""
        self._http.request("DELETE", self._file_url(path), ok=(204,))

    def _file_url(self, path: str) -> str:
        if not isinstance(path, str):
            raise TypeError(f"path must be a str, not {type(path).__name__}")
        return self._base + "/files/" + urllib.parse.quote(path, safe="/")
