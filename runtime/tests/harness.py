"""Drive the real runtime over a socketpair, the way the supervisor does.

The runtime runs as ``/usr/bin/python3 -I -S -B runtime/kiln_runtime/launch.py``
with one end of a SOCK_STREAM socketpair as its fd 3 and pipes on fds 1 and 2;
no sandbox is involved.
"""

import base64
import json
import os
import socket
import subprocess
import tempfile
import unittest

PYTHON = "/usr/bin/python3"
# As the supervisor starts it (src/supervisor/sandbox.cc): isolated, no site, no .pyc writes.
PYTHON_FLAGS = ("-I", "-S", "-B")
RUNTIME_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH = os.path.join(RUNTIME_ROOT, "kiln_runtime", "launch.py")
MPL_BACKEND = "module://kiln_runtime.mpl_backend"
TIMEOUT = 60

STRICT = {"mode": "denylist",
          "modules": ["os", "subprocess", "socket", "sys", "ctypes", "importlib", "pkgutil",
                      "shutil"]}

# One matplotlib cache for the whole run (building it is slow).
_MPL_CONFIG = os.path.join(tempfile.gettempdir(), "kiln-runtime-tests-mplconfig")


class Runtime:
    """One runtime process and the supervisor's end of its channel."""

    def __init__(self, *args, python_flags=(), workspace=None, env=None):
        if not os.access(PYTHON, os.X_OK):
            raise unittest.SkipTest("%s is not installed" % PYTHON)
        self._tmp = None
        if workspace is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kiln-ws-")
            workspace = self._tmp.name
        self.workspace = workspace
        os.makedirs(_MPL_CONFIG, exist_ok=True)
        full_env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": workspace,
            "MPLBACKEND": MPL_BACKEND,
            "MPLCONFIGDIR": _MPL_CONFIG,
        }
        full_env.update(env or {})
        # Created first, so the sockets take the lowest free fds and fd 3 of
        # the test process is never Popen's own error pipe.
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child_fd = child.fileno()
        self.proc = subprocess.Popen(
            [PYTHON, *PYTHON_FLAGS, *python_flags, LAUNCH, "--workspace", workspace, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=workspace, env=full_env, close_fds=False,
            preexec_fn=lambda: os.dup2(child_fd, 3))
        child.close()
        self.sock.settimeout(TIMEOUT)
        self.next_cell = 1
        self.syncs = 0  # sync frames answered (stdout/stderr switches)
        self.stdout = self.stderr = None

    # -- frames ---------------------------------------------------------------------

    def _recv_exact(self, n):
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise EOFError("runtime closed the channel after %d of %d bytes" % (got, n))
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def recv(self):
        length = int.from_bytes(self._recv_exact(4), "big")
        frame = json.loads(self._recv_exact(length).decode("utf-8"))
        assert isinstance(frame, dict) and isinstance(frame.get("type"), str), frame
        return frame

    def send(self, obj):
        self.send_raw(json.dumps(obj).encode("utf-8"))

    def send_raw(self, payload, length=None):
        n = len(payload) if length is None else length
        self.sock.sendall(n.to_bytes(4, "big") + payload)

    def hello(self):
        frame = self.recv()
        assert frame["type"] == "hello", frame
        return frame

    def execute(self, code, policy=None, limits=None, filename="<cell>", cell=None, **extra):
        """All frames of one cell, up to and including execute_reply.

        ``extra``: more members of the execute frame (context, env, command, ...)."""
        if cell is None:
            cell = self.next_cell
        self.next_cell = cell + 1
        msg = {"type": "execute", "cell": cell, "code": code, "filename": filename,
               "import_policy": policy or {"mode": "open", "modules": []},
               "limits": {"max_images": 16, "max_image_bytes": 8 << 20} if limits is None
               else limits}
        msg.update(extra)
        self.send(msg)
        frames = []
        while True:
            frame = self.recv()
            if frame["type"] == "sync":
                # As the supervisor does: the pipes are read up to here; go on.
                self.send({"type": "synced"})
                self.syncs += 1
                continue
            frames.append(frame)
            if frame["type"] == "execute_reply":
                return frames

    # -- the end --------------------------------------------------------------------

    def shutdown(self):
        self.send({"type": "shutdown"})
        return self.finish()

    def close_channel(self):
        self.sock.shutdown(socket.SHUT_WR)
        return self.finish()

    def finish(self):
        """Wait for the process; returns its exit code (stdout/stderr kept as text)."""
        try:
            out, err = self.proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        self.stdout = out.decode("utf-8", "replace")
        self.stderr = err.decode("utf-8", "replace")
        self.sock.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return self.proc.returncode

    def kill(self):
        if self.stdout is not None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.finish()


_importable = {}


def requires(*modules):
    """Skips a test (or class) whose cells import `modules` when the runtime's
    interpreter cannot import one of them, naming the Debian package."""
    missing = []
    for name in modules:
        if name not in _importable:
            _importable[name] = os.access(PYTHON, os.X_OK) and subprocess.run(
                [PYTHON, "-I", "-c", "import " + name], capture_output=True,
                timeout=TIMEOUT).returncode == 0
        if not _importable[name]:
            missing.append(name)
    packages = " ".join("python3-" + ("pil" if m == "PIL" else m) for m in missing)
    return unittest.skipIf(bool(missing), "%s cannot import %s on this host (Debian: %s)"
                           % (PYTHON, ", ".join(missing), packages))


def of_type(frames, kind):
    return [f for f in frames if f["type"] == kind]


def reply(frames):
    last = frames[-1]
    assert last["type"] == "execute_reply", last
    return last


def png_of(frame):
    """(raw PNG bytes, width, height) of a frame's image/png."""
    raw = base64.b64decode(frame["data"]["image/png"], validate=True)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", raw[:8]
    width = int.from_bytes(raw[16:20], "big")
    height = int.from_bytes(raw[20:24], "big")
    return raw, width, height


class RuntimeTestCase(unittest.TestCase):
    """A fresh runtime per test (self.rt), hello already received."""

    runtime_args = ()

    def setUp(self):
        self.rt = Runtime(*self.runtime_args)
        self.addCleanup(self.rt.kill)
        self.hello = self.rt.hello()


class SharedRuntimeTestCase(unittest.TestCase):
    """One runtime for the whole class (for tests that only add state)."""

    runtime_args = ()

    @classmethod
    def setUpClass(cls):
        cls.rt = Runtime(*cls.runtime_args)
        cls.rt.hello()

    @classmethod
    def tearDownClass(cls):
        cls.rt.kill()
