#!/usr/bin/python3
"""Python tools for an agent, in the reference design's LangChain style, on kiln.

Two tools:

  PythonSandboxTool          each call is a fresh interpreter (POST /v1/execute)
  StatefulPythonSandboxTool  one kiln session: variables, imports and files carry
                             over between calls, like notebook cells

    from langchain_tool import PythonSandboxTool, StatefulPythonSandboxTool
    tool = PythonSandboxTool()                      # KilnClient() from $KILN_API_KEY
    print(tool.run("import numpy as np\\nnp.linspace(0, 1, 5)"))

    with StatefulPythonSandboxTool() as tool:       # deletes its session at the end
        tool.run("import pandas as pd\\ndf = pd.DataFrame({'a': [1, 2, 3]})")
        print(tool.run("df.a.sum()"))               # [result] 6

LangChain itself is optional: if langchain_core is installed, `tool.as_langchain_tool()`
returns a StructuredTool to hand to an agent. Run this file to try it (each
argument is one call; --stateful runs them in one session):

    KILN_API_KEY=... /usr/bin/python3 examples/langchain_tool.py "print(6 * 7)"
    KILN_API_KEY=... /usr/bin/python3 examples/langchain_tool.py --stateful "x = 6" "x * 7"
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kiln_client import KilnClient, KilnError, Session, SessionBusy, SessionGone  # noqa: E402

try:  # optional: only for as_langchain_tool()
    from langchain_core.tools import StructuredTool
except ImportError:
    StructuredTool = None

_ENVIRONMENT = (
    "Installed: numpy, pandas, matplotlib, scipy, scikit-learn (sklearn), sympy, pillow, "
    "openpyxl; nothing else can be installed. There is no network access. "
)
_OUTPUT = (
    "print() what you want to see; the value of the last line is shown too, like a "
    "notebook cell. Errors come back with their traceback. Matplotlib figures are "
    "rendered but not shown to you: print the numbers you need."
)


class _CodeTool:
    """What both tools share: the argument schema, run()'s calling conventions,
    and the LangChain adapter. Subclasses set name and description and define _run."""

    name = ""
    description = ""
    args_schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python source to run"},
        },
        "required": ["code"],
    }

    def _run(self, code: str) -> str:
        raise NotImplementedError

    def run(self, tool_input: str | dict[str, Any] | None = None, **kwargs: Any) -> str:
        """tool.run("print(1)"), tool.run({"code": "print(1)"}) or tool.run(code="print(1)")."""
        if isinstance(tool_input, dict):
            kwargs = {**tool_input, **kwargs}
        elif tool_input is not None:
            kwargs["code"] = tool_input
        if not isinstance(kwargs.get("code"), str):
            raise ValueError(f"{self.name} needs a 'code' string")
        return self._run(kwargs["code"])

    def as_langchain_tool(self):
        """This tool as a langchain_core StructuredTool (needs langchain_core >= 0.3)."""
        if StructuredTool is None:
            raise ImportError("langchain_core is not installed")
        return StructuredTool.from_function(func=self._run, name=self.name,
                                            description=self.description,
                                            args_schema=self.args_schema)


class PythonSandboxTool(_CodeTool):
    name = "python_sandbox"
    description = (
        "Run Python 3.11 code in an isolated sandbox and get back its output. " + _ENVIRONMENT +
        "Each call is a fresh interpreter: variables, imports and files do NOT carry over "
        "between calls, so include everything the code needs every time. "
        "Limits per call: 30 s wall clock, 512 MB memory, 1 CPU, 1 MB of output; the "
        "working directory /workspace is writable (128 MB) and discarded afterwards. " + _OUTPUT
    )
    args_schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python source to run, as a complete program"},
        },
        "required": ["code"],
    }

    def __init__(self, client: KilnClient | None = None, *, profile: str | None = None,
                 timeout: float | None = None, max_chars: int = 12000) -> None:
        self.client = client or KilnClient(retries=2)
        self.profile = profile
        self.timeout = timeout
        self.max_chars = max_chars

    def _run(self, code: str) -> str:
        try:
            result = self.client.execute(code, profile=self.profile, timeout=self.timeout)
        except KilnError as e:
            return f"[sandbox unavailable] {e}"
        return result.text(max_chars=self.max_chars)


class StatefulPythonSandboxTool(_CodeTool):
    """A Python tool backed by one kiln session: each call is the next notebook
    cell of the same interpreter. The session is created on the first call and
    replaced (the model is told its state is gone) if the server ends it; close()
    (or leaving a `with` block) deletes it. Files for the code to read can be
    put in its workspace with upload()."""

    name = "python_session"
    description = (
        "Run Python 3.11 code in a persistent, isolated sandbox session, like the next "
        "cell of a Jupyter notebook: variables, imports, functions and files in the "
        "working directory /workspace carry over from one call to the next, so build on "
        "earlier results instead of repeating them. " + _ENVIRONMENT +
        "Limits per call: 30 s wall clock; the session has 512 MB of memory, 1 CPU and "
        "128 MB of disk, and ends after 10 minutes unused. If the tool says the session "
        "was reset, everything defined before is gone: define it again. " + _OUTPUT
    )
    args_schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string",
                     "description": "Python source to run as the next cell; earlier cells' variables exist"},
        },
        "required": ["code"],
    }

    RESET_NOTE = ("[session reset] the Python session ended ({why}); all variables, imports and "
                  "files are gone and the next call starts a fresh session.")

    def __init__(self, client: KilnClient | None = None, *, profile: str | None = None,
                 timeout: float | None = None, idle_ttl: float | None = None,
                 max_chars: int = 12000) -> None:
        self.client = client or KilnClient(retries=2)
        self.profile = profile
        self.timeout = timeout
        self.idle_ttl = idle_ttl
        self.max_chars = max_chars
        self._session: Session | None = None

    @property
    def session_id(self) -> str | None:
        """The current session's id, or None before the first call / after a reset."""
        return self._session.id if self._session else None

    def session(self) -> Session:
        """The current session, created if there is none."""
        if self._session is None:
            self._session = self.client.create_session(profile=self.profile, timeout=self.timeout,
                                                       idle_ttl=self.idle_ttl)
        return self._session

    def upload(self, path: str, content: bytes) -> None:
        """Puts a file into the session's /workspace for the code to read."""
        self.session().upload(path, content)

    def _run(self, code: str) -> str:
        try:
            result = self.session().execute(code, timeout=self.timeout)
        except SessionBusy:
            return "[busy] another cell of this session is still running; try again when it ends"
        except SessionGone as e:
            self._session = None
            return self.RESET_NOTE.format(why=e.message)
        except KilnError as e:
            return f"[sandbox unavailable] {e}"
        text = result.text(max_chars=self.max_chars)
        if result.session_state == "lost":
            self._session = None
            text += "\n" + self.RESET_NOTE.format(why=result.reason or result.status)
        return text

    def close(self) -> None:
        """Deletes the session (if any)."""
        session, self._session = self._session, None
        if session is not None:
            session.delete(missing_ok=True)

    def __enter__(self) -> "StatefulPythonSandboxTool":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def main(argv: list[str]) -> None:
    url = os.environ.get("KILN_URL", "http://127.0.0.1:8080")
    client = KilnClient(url, retries=2)
    if argv[:1] == ["--stateful"]:
        with StatefulPythonSandboxTool(client) as tool:
            for code in argv[1:]:
                print(tool.run(code))
        return
    print(PythonSandboxTool(client).run(" ".join(argv) or sys.stdin.read()))


if __name__ == "__main__":
    main(sys.argv[1:])
