"""The result of one execution: the shared result shape of POST /v1/execute
(docs/openapi.json, ExecuteResult), as a dataclass with helpers."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _b64(s: Any) -> bytes | None:
    if isinstance(s, list):  # nbformat allows multi-line strings as lists
        s = "".join(s)
    if not isinstance(s, str):
        return None
    try:
        return base64.b64decode(s)
    except (binascii.Error, ValueError):
        return None


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _plain(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    t = data.get("text/plain")
    if isinstance(t, list):
        t = "".join(t)
    return t if isinstance(t, str) else None


@dataclass
class ExecutionResult:
    """What one execution did. `status` says how it ended ("ok", "error", "timeout",
    "cpu_limit", "memory_limit", "output_limit", "signaled", "policy_violation",
    "setup_error", "protocol_error", "cancelled", and in a session "interrupted");
    a non-"ok" status is not an exception: the request itself succeeded.

    A session's cell also has `session_id` and `session_state`: "kept" (the
    interpreter and its variables live on) or "lost" (the cell ended the session,
    e.g. it exited or ran out of memory: the next call raises SessionGone).
    `execution_count` numbers a session's cells (1, 2, ...)."""

    status: str
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: float = 0.0
    cpu_ms: float = 0.0
    peak_memory_bytes: int = 0
    outputs: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None       # {"name", "value", "traceback": [...]}
    execution_count: int | None = None
    id: str = ""
    reason: str = ""
    session_id: str | None = None
    session_state: str | None = None  # "kept" | "lost"; None outside a session
    files: dict[str, bytes] = field(default_factory=dict)  # with return_files
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # the whole body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "ExecutionResult":
        files: dict[str, bytes] = {}
        for f in body.get("files") or []:
            if isinstance(f, dict) and isinstance(f.get("path"), str):
                content = _b64(f.get("content_base64", ""))
                files[f["path"]] = content if content is not None else b""
        return cls(
            status=str(body.get("status", "")),
            exit_code=body.get("exit_code"),
            signal=body.get("signal"),
            stdout=body.get("stdout") or "",
            stderr=body.get("stderr") or "",
            stdout_truncated=bool(body.get("stdout_truncated", False)),
            stderr_truncated=bool(body.get("stderr_truncated", False)),
            duration_ms=float(body.get("duration_ms") or 0.0),
            cpu_ms=float(body.get("cpu_ms") or 0.0),
            peak_memory_bytes=int(body.get("peak_memory_bytes") or 0),
            outputs=list(body.get("outputs") or []),
            error=body.get("error") if isinstance(body.get("error"), dict) else None,
            execution_count=body.get("execution_count"),
            id=str(body.get("id") or ""),
            reason=str(body.get("reason") or ""),
            session_id=_opt_str(body.get("session_id")),
            session_state=_opt_str(body.get("session_state")),
            files=files,
            raw=body,
        )

    # --- helpers -------------------------------------------------------------

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def session_kept(self) -> bool:
        """True when this was a session's cell and the session lives on."""
        return self.session_state == "kept"

    @property
    def result_text(self) -> str | None:
        """text/plain of the last expression's value (the execute_result), if any."""
        for o in reversed(self.outputs):
            if o.get("output_type") == "execute_result":
                return _plain(o.get("data"))
        return None

    @property
    def images(self) -> list[bytes]:
        """PNG images (bytes) from display_data and execute_result outputs, in order."""
        out = []
        for o in self.outputs:
            if o.get("output_type") in ("display_data", "execute_result"):
                data = o.get("data")
                if isinstance(data, dict) and "image/png" in data:
                    png = _b64(data["image/png"])
                    if png:
                        out.append(png)
        return out

    @property
    def traceback(self) -> str:
        """The uncaught exception's traceback as one string ("" if none)."""
        if not self.error:
            return ""
        tb = self.error.get("traceback") or []
        if isinstance(tb, list):
            lines = [str(x) for x in tb]
            # Entries are lines without "\n" (kiln) or with it (traceback.format_exception).
            text = "".join(lines) if all(x.endswith("\n") for x in lines) else \
                "\n".join(x.rstrip("\n") for x in lines)
        else:
            text = str(tb)
        last = f"{self.error.get('name', '')}: {self.error.get('value', '')}"
        if last.strip(": ") and last not in text:
            text = text.rstrip("\n") + ("\n" if text else "") + last
        return text.rstrip("\n")

    def text(self, max_chars: int | None = None) -> str:
        """A plain-text summary for a model: stdout, stderr, the last value, other
        displays, the traceback, and why it stopped if it did not end "ok".
        With max_chars, each section is cut in the middle to fit."""
        parts: list[tuple[str, str]] = []
        stderr = self.stderr
        tb = self.traceback
        if tb and stderr.rstrip("\n").endswith(tb.rstrip("\n").splitlines()[-1]):
            tb = ""  # the runtime already printed it on stderr
        if self.stdout:
            parts.append(("stdout" + (" (truncated)" if self.stdout_truncated else ""), self.stdout))
        if stderr:
            parts.append(("stderr" + (" (truncated)" if self.stderr_truncated else ""), stderr))
        n_images = 0
        for o in self.outputs:
            kind = o.get("output_type")
            data = o.get("data")
            if kind not in ("display_data", "execute_result") or not isinstance(data, dict):
                continue
            if "image/png" in data:
                n_images += 1
            elif kind == "display_data" and _plain(data):
                parts.append(("display", _plain(data) or ""))
        if self.result_text is not None:
            parts.append(("result", self.result_text))
        if tb:
            parts.append(("error", tb))
        if n_images:
            parts.append(("images", f"{n_images} PNG image(s) produced (not shown in text)"))
        if not self.ok and not (self.status == "error" and self.error):  # a traceback says it all
            why = self.reason or ""
            if why and any(why in body for _, body in parts):
                why = ""  # already shown
            parts.append(("status", f"{self.status}" + (f" ({why})" if why else "")))
        if not parts:
            return "(no output)"
        budget = None
        if max_chars is not None:
            budget = max(200, max_chars // len(parts))
        lines = []
        for title, body in parts:
            body = body.rstrip("\n")
            if budget is not None and len(body) > budget:
                half = budget // 2
                body = f"{body[:half]}\n... [{len(body) - 2 * half} characters cut] ...\n{body[-half:]}"
            lines.append(f"[{title}]\n{body}" if "\n" in body or title in ("stdout", "stderr", "error")
                         else f"[{title}] {body}")
        return "\n".join(lines)
