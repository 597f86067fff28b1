"""The launcher: the first Python code that runs in a kiln sandbox.

The supervisor starts ``python3 -I -B launch.py`` with the program's text on
fd 3 (docs/protocol.md, "program channel").  The launcher blocks on fd 3 while
the supervisor finishes the sandbox (on cgroup v1 it moves this process into
its cgroup while the interpreter starts), so no line of the program runs before
every limit is in place.  It then runs the program as ``__main__``, like
``python3 FILE``, with tracebacks that start at the program's own frames.

Kept deliberately small and import-light: everything here is paid on every
start.
"""

import sys

_PROGRAM_FD = 3
_MAGIC = b"KILN0 "


def _read_program():
    import os  # already imported by site; costs nothing

    chunks = []
    while True:
        chunk = os.read(_PROGRAM_FD, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(_PROGRAM_FD)
    data = b"".join(chunks)
    header, sep, source = data.partition(b"\n")
    if not sep or not header.startswith(_MAGIC):
        sys.stderr.write("kiln launcher: malformed program header\n")
        raise SystemExit(125)
    return header[len(_MAGIC):].decode("utf-8", "replace"), source


def _print_user_traceback(filename, source, exc):
    import linecache
    import traceback

    # Make the program's own lines show in the traceback (it has no file).
    text = source.decode("utf-8", "replace")
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    tb = exc.__traceback__
    # Drop the launcher's frames: the traceback starts at the user's code.
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def main():
    filename, source = _read_program()
    import types

    module = types.ModuleType("__main__")
    module.__file__ = filename
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    sys.argv = [filename]
    # Like `python3 FILE`: the program's directory (the workspace) comes first.
    sys.path.insert(0, "/workspace")
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
        exec(code, module.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report everything, like the interpreter
        _print_user_traceback(filename, source, exc)
        sys.stdout.flush()
        raise SystemExit(1)


if __name__ == "__main__":
    main()
