#!/usr/bin/python3
"""A Python tool for an agent, in the reference design's LangChain style, on kiln.

    from langchain_tool import PythonSandboxTool
    tool = PythonSandboxTool()                      # KilnClient() from $KILN_API_KEY
    print(tool.run("import numpy as np\\nnp.linspace(0, 1, 5)"))

LangChain itself is optional: if langchain_core is installed, `tool.as_langchain_tool()`
returns a StructuredTool to hand to an agent. Run this file to try it:

    KILN_API_KEY=... /usr/bin/python3 examples/langchain_tool.py "print(6 * 7)"
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kiln_client import KilnClient, KilnError  # noqa: E402

try:  # optional: only for as_langchain_tool()
    from langchain_core.tools import StructuredTool
except ImportError:
    StructuredTool = None


class PythonSandboxTool:
    name = "python_sandbox"
    description = (
        "Run Python 3.11 code in an isolated sandbox and get back its output. "
        "Installed: numpy, pandas, matplotlib, scipy, scikit-learn (sklearn), sympy, pillow, "
        "openpyxl; nothing else can be installed. There is no network access. "
        "Each call is a fresh interpreter: variables, imports and files do NOT carry over "
        "between calls, so include everything the code needs every time. "
        "Limits per call: 30 s wall clock, 512 MB memory, 1 CPU, 1 MB of output; the "
        "working directory /workspace is writable (128 MB) and discarded afterwards. "
        "print() what you want to see; the value of the last line is shown too, like a "
        "notebook cell. Errors come back with their traceback. Matplotlib figures are "
        "rendered but not shown to you: print the numbers you need."
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

    def run(self, tool_input: str | dict[str, Any] | None = None, **kwargs: Any) -> str:
        """tool.run("print(1)"), tool.run({"code": "print(1)"}) or tool.run(code="print(1)")."""
        if isinstance(tool_input, dict):
            kwargs = {**tool_input, **kwargs}
        elif tool_input is not None:
            kwargs["code"] = tool_input
        if not isinstance(kwargs.get("code"), str):
            raise ValueError("python_sandbox needs a 'code' string")
        return self._run(kwargs["code"])

    def as_langchain_tool(self):
        """This tool as a langchain_core StructuredTool (needs langchain_core >= 0.3)."""
        if StructuredTool is None:
            raise ImportError("langchain_core is not installed")
        return StructuredTool.from_function(func=self._run, name=self.name,
                                            description=self.description,
                                            args_schema=self.args_schema)


if __name__ == "__main__":
    url = os.environ.get("KILN_URL", "http://127.0.0.1:8080")
    tool = PythonSandboxTool(KilnClient(url, retries=2))
    print(tool.run(" ".join(sys.argv[1:]) or sys.stdin.read()))
