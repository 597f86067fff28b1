"""kiln's in-sandbox runtime: the Python side of docs/protocol.md."""

import sys

# sys.path as it was before the program's directories joined it: the runner
# sets it on the first execute, just before the workspace goes first.
runtime_path = None


def _program_module(module, dirs):
    """Whether ``module`` was loaded from outside ``dirs`` (the program's own, or the
    workspace's): the runtime must not use it in place of a standard module."""
    try:
        filename = module.__dict__.get("__file__")
    except Exception:  # noqa: BLE001 - not a module
        return False
    return type(filename) is str and not filename.startswith(dirs)


def runtime_import(name):
    """Module ``name`` for the runtime's own use, imported from ``runtime_path``.

    The runtime imports ``traceback`` and friends only when it needs them (the
    error path), long after the workspace went first on ``sys.path``.  They must
    still be the standard library's: while ``name`` is imported, ``sys.path`` is
    ``runtime_path`` and modules the program loaded from elsewhere (its own
    ``tokenize.py``) are out of ``sys.modules``; the program's are put back after,
    so it keeps seeing its own.  Not thread-safe against imports the program's
    threads make meanwhile (an error path is rare; the race is harmless unless
    one of them imports a module of the same name).
    """
    path = runtime_path
    module = sys.modules.get(name)
    dirs = tuple(d.rstrip("/") + "/" for d in path or () if type(d) is str and d.startswith("/"))
    if not dirs:  # user code has not started
        if module is None:
            __import__(name)
            module = sys.modules[name]
        return module
    if module is not None and not _program_module(module, dirs):
        return module
    hidden = {key: mod for key, mod in list(sys.modules.items())
              if key != "__main__" and _program_module(mod, dirs)}
    for key in hidden:
        del sys.modules[key]
    saved = sys.path
    sys.path = list(path)
    try:
        __import__(name)
        return sys.modules[name]
    finally:
        sys.path = saved
        sys.modules.update(hidden)
