"""Starts a real `kiln serve` for the tests: 127.0.0.1, an ephemeral port, its own
data directory; stops it with SIGTERM."""

from __future__ import annotations

import json
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


# The interpreter kiln's profiles run (kiln.toml), probed bare on the host.
HOST_PYTHON = "/usr/bin/python3"


def find_kiln() -> str:
    """$KILN_BIN, else build/kiln; raises unittest.SkipTest if neither exists, or
    if `kiln doctor` says this host cannot run its sandboxes."""
    path = os.environ.get("KILN_BIN") or os.path.join(REPO, "build", "kiln")
    if not os.access(path, os.X_OK):
        raise unittest.SkipTest(f"no kiln binary: set $KILN_BIN or build {path}")
    why = sandbox_missing(path)
    if why:
        raise unittest.SkipTest(why)
    return path


def sandbox_missing(kiln: str) -> str | None:
    """Why kiln cannot run sandboxes on this host, from `kiln doctor --json --no-smoke`:
    user namespaces or Landlock (required by kiln's default policy) missing, or, as
    root, no cgroups (required there). A doctor that gives no usable answer raises:
    it must fail the tests, never skip them. (The gtest tiers cross-check each of
    these verdicts with their own probe of the host, tests/testlib/host_facts.h.)"""
    out = subprocess.run([kiln, "doctor", "--json", "--no-smoke"], capture_output=True, text=True,
                         timeout=60).stdout
    layers = {layer["name"]: layer for layer in json.loads(out)["layers"]}
    missing = []
    for name in ("user namespace", "landlock", "cgroup"):
        layer = layers[name]  # a KeyError is a broken doctor
        if layer["state"] == "missing" and layer["required"]:
            missing.append(f"{name}: {layer['detail']}")
    return "kiln doctor: missing on this host: " + "; ".join(missing) if missing else None


_importable: dict[str, bool] = {}


def require_modules(*names: str) -> None:
    """unittest.SkipTest, naming the Debian packages, when the host's /usr/bin/python3
    (which the sandbox runs) cannot import one of `names`."""
    for name in names:
        if name not in _importable:
            _importable[name] = subprocess.run([HOST_PYTHON, "-I", "-c", "import " + name],
                                               capture_output=True, timeout=120).returncode == 0
    missing = [n for n in names if not _importable[n]]
    if missing:
        packages = " ".join("python3-" + ("pil" if n == "PIL" else n) for n in missing)
        raise unittest.SkipTest(f"{HOST_PYTHON} cannot import {', '.join(missing)} on this host "
                                f"(Debian: {packages}, which `make deps` installs)")


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
