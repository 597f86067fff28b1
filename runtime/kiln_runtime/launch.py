"""Stopgap launcher speaking protocol v1 (docs/protocol.md section 2) minimally:
hello, one execute, execute_reply. The full runtime replaces this file."""

import os
import sys
import struct
import json

_FD = 3


def _send(msg):
    data = json.dumps(msg).encode()
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(_FD, struct.pack(">I", len(data)) + data)


def _recv():
    buf = b""
    while len(buf) < 4:
        c = os.read(_FD, 4 - len(buf))
        if not c:
            return None
        buf += c
    (n,) = struct.unpack(">I", buf)
    data = b""
    while len(data) < n:
        c = os.read(_FD, n - len(data))
        if not c:
            return None
        data += c
    return json.loads(data)


def main():
    _send({"type": "hello", "protocol": 1, "python": sys.version.split()[0], "pid": os.getpid()})
    req = _recv()
    if not req or req.get("type") != "execute":
        raise SystemExit(1)
    import types
    module = types.ModuleType("__main__")
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    sys.path.insert(0, "/workspace")
    cell = req["cell"]
    status, code = "ok", 0
    try:
        exec(compile(req["code"], req["filename"], "exec", dont_inherit=True), module.__dict__)
    except SystemExit as e:
        status, code = "exit", (e.code if isinstance(e.code, int) else (0 if e.code is None else 1))
    except BaseException as exc:  # noqa: BLE001
        import traceback
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        lines = traceback.format_exception(type(exc), exc, tb)
        _send({"type": "error", "cell": cell, "ename": type(exc).__name__, "evalue": str(exc),
               "traceback": lines})
        status, code = "error", 1
    _send({"type": "execute_reply", "cell": cell, "status": status, "execution_count": 1,
           "exit_code": code})
    _recv()
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
