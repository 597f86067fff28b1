"""Tracebacks for the ``error`` frame: plain text, starting at the program's frames.

Every entry of the list is one string as ``traceback.format_exception`` yields
it, without its trailing newline (nbformat's convention: a client prints
``"\\n".join(traceback)`` and gets exactly what Python prints).  The runtime's
own frames are removed wherever they are (the runner's ``exec``, ``display()``
calling a ``__repr__``, the import hook), and each frame of a cell shows the
source line of the cell it came from, even when several cells share a filename
(``<cell>``): ``sources`` maps code objects of cells to their lines.

Loaded on the error path only; ``traceback`` (with linecache, tokenize, re...)
is imported on the first error, through ``kiln_runtime.runtime_import``.
"""

import kiln_runtime

# This package's directory (__file__ is absolute: sys.path[0] is, see launch.py).
RUNTIME_DIR = __file__.rpartition("/")[0] + "/"


def _is_runtime_frame(frame):
    return frame.f_code.co_filename.startswith(RUNTIME_DIR)


def strip_runtime_frames(tb):
    """A copy of the traceback chain ``tb`` without the runtime's frames."""
    kept = []
    while tb is not None:
        if not _is_runtime_frame(tb.tb_frame):
            kept.append(tb)
        tb = tb.tb_next
    new = None
    for entry in reversed(kept):
        new = type(entry)(new, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return new


def _exceptions_in_chain(exc):
    seen = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen or not isinstance(e, BaseException):
            continue
        seen.add(id(e))
        yield e
        todo.append(e.__cause__)
        todo.append(e.__context__)
        todo.extend(getattr(e, "exceptions", None) or ())


def _patch_lines(te, exc, sources, seen):
    """Give each frame summary of ``te`` its cell's source line (walks the chain)."""
    if te is None or exc is None or id(te) in seen:
        return
    seen.add(id(te))
    tbs = []
    tb = exc.__traceback__
    while tb is not None:
        tbs.append(tb)
        tb = tb.tb_next
    if len(tbs) == len(te.stack):
        for fs, tb in zip(te.stack, tbs):
            known = sources.get(id(tb.tb_frame.f_code))
            if known is not None and fs.lineno is not None:
                lines = known[1]
                if 0 < fs.lineno <= len(lines):
                    fs._line = lines[fs.lineno - 1]
    _patch_lines(te.__cause__, exc.__cause__, sources, seen)
    _patch_lines(te.__context__, exc.__context__, sources, seen)
    for sub_te, sub_exc in zip(te.exceptions or (), getattr(exc, "exceptions", None) or ()):
        _patch_lines(sub_te, sub_exc, sources, seen)


def _safe_str(obj):
    try:
        return str(obj)
    except BaseException:  # noqa: BLE001 - a hostile __str__ must not break reporting
        return "<exception str() failed>"


def format_exception(exc, sources=None):
    """(ename, evalue, traceback list) of ``exc``; strips runtime frames in place."""
    ename = type(exc).__name__
    evalue = _safe_str(exc)
    try:
        traceback = kiln_runtime.runtime_import("traceback")
        for e in _exceptions_in_chain(exc):
            e.__traceback__ = strip_runtime_frames(e.__traceback__)
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__,
                                          lookup_lines=False)
        if sources:
            _patch_lines(te, exc, sources, set())
        lines = [entry[:-1] if entry.endswith("\n") else entry for entry in te.format()]
    except Exception as fail:  # noqa: BLE001 - never lose the error itself
        lines = ["%s: %s" % (ename, evalue),
                 "(kiln: the traceback could not be formatted: %s)" % type(fail).__name__]
    return ename, evalue, lines
