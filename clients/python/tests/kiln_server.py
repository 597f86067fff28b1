"""Starts a real `kiln serve` for the tests: 127.0.0.1, an ephemeral port, its own
data directory; stops it with SIGTERM."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LISTENING = re.compile(r"kiln: listening on (http://[0-9.]+:\d+)")


def find_kiln() -> str:
    """$KILN_BIN, else build/kiln; raises unittest.SkipTest if neither exists."""
    path = os.environ.get("KILN_BIN") or os.path.join(REPO, "build", "kiln")
    if not os.access(path, os.X_OK):
        raise unittest.SkipTest(f"no kiln binary: set $KILN_BIN or build {path}")
    return path


class KilnServer:
    def __init__(self, kiln: str, config: str | None = None, start_timeout: float = 120.0) -> None:
        self.tmp = tempfile.mkdtemp(prefix="kiln-pyclient-")
        argv = [kiln, "serve", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(self.tmp, "data")]
        if config:
            argv += ["--config", config]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        self.stderr_lines: list[str] = []
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.url = None
        self.key = None
        found = threading.Event()

        def read_stderr():
            for line in self.proc.stderr:
                self.stderr_lines.append(line)
                m = LISTENING.search(line)
                if m and not found.is_set():
                    self.url = m.group(1)
                    found.set()
            found.set()

        def read_stdout():
            line = self.proc.stdout.readline()
            self.key = line.strip() or None
            self.proc.stdout.read()  # keep draining

        self._readers = [threading.Thread(target=read_stderr, daemon=True),
                         threading.Thread(target=read_stdout, daemon=True)]
        for reader in self._readers:
            reader.start()
        found.wait(start_timeout)
        deadline = time.monotonic() + 5
        while self.key is None and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.05)
        if self.url is None or self.key is None:
            self.stop()
            raise RuntimeError("kiln serve did not start: " + "".join(self.stderr_lines[-20:]))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for reader in self._readers:  # they end at EOF, now that the process is gone
            reader.join(5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None and not any(r.is_alive() for r in self._readers):
                pipe.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
