"""Frames on the runtime channel (docs/protocol.md, section 2).

frame = 4-byte big-endian length + one UTF-8 JSON object with a string "type".

This module is on the hello path: it imports nothing at load time (``sys`` and
``posix`` are loaded by the interpreter before any code runs; ``os`` is not,
under ``-S``).  Frames are encoded and decoded with the C accelerator ``_json``
directly, as ``json`` itself does, but without importing ``json`` (which pulls
in ``re`` and ``enum``): ``_json`` is loaded on the first real frame, after
hello has gone out.
"""

import posix
import sys

PROTOCOL_VERSION = 2

# What the runtime accepts from the supervisor (docs/protocol.md).
MAX_INBOUND_BYTES = 256 << 20
# What the supervisor accepts from the runtime (kMaxFrameBytes).  The runtime
# keeps its own frames below it so an honest cell never ends as protocol_error.
MAX_OUTBOUND_BYTES = 32 << 20

_JSON_WHITESPACE = " \t\n\r"


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame."""


class ChannelClosed(Exception):
    """The supervisor's end of the channel is gone (EPIPE and friends)."""


# -- JSON ------------------------------------------------------------------------------

def _not_serializable(obj):
    # json.JSONEncoder.default
    raise TypeError("Object of type %s is not JSON serializable" % obj.__class__.__name__)


class _ScanContext:
    """What ``_json.make_scanner`` reads from a json.decoder.JSONDecoder (json.loads's defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float  # the C scanner's fast paths test for exactly float and int
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__
    memo = {}


def _c_codec(c_json):
    """(dumps, loads) over the ``_json`` module ``c_json``."""
    scan_once = c_json.make_scanner(_ScanContext())
    make_encoder = c_json.make_encoder
    encode_str = c_json.encode_basestring  # ensure_ascii=False: UTF-8 text

    def dumps(obj):
        # json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False),
        # which is json.encoder's c_make_encoder path.  A new encoder per call, as
        # in json: a failed encoding leaves its circular-reference markers dirty.
        return "".join(make_encoder({}, _not_serializable, encode_str, None, ":", ",",
                                    False, False, False)(obj, 0))

    def scan(text):
        # json.loads(text): json.decoder.JSONDecoder.decode around the C scanner.
        if text.startswith("\ufeff"):
            raise ValueError("Unexpected UTF-8 BOM")
        n = len(text)
        i = 0
        while i < n and text[i] in _JSON_WHITESPACE:
            i += 1
        obj, end = scan_once(text, i)
        while n > end and text[n - 1] in _JSON_WHITESPACE:
            n -= 1
        if n != end:
            raise ValueError("Extra data")
        return obj

    def loads(text):
        try:
            return scan(text)
        except Exception:  # noqa: BLE001
            # Not JSON.  The C scanner raises json.decoder.JSONDecodeError, a
            # class it looks up in sys.modules only: without json loaded, CPython
            # 3.11 turns that into SystemError ("returned NULL without setting an
            # exception"); other errors come out as StopIteration.  A malformed
            # frame ends the runtime anyway, so json decides and names the error.
            import json

            return json.loads(text)

    return dumps, loads


def _json_module_codec():
    import json

    def dumps(obj):
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    return dumps, json.loads


def _make_codec():
    """(dumps, loads): the ``_json`` functions, or ``json``'s if they cannot be used.

    ``_json`` is CPython's private accelerator: another build may lack it
    (ImportError) or have changed what its constructors take (TypeError,
    AttributeError; the scanner reads its options from the context object's
    attributes).  So the codec is tried once on a sample, and the ``json``
    module - slower to import, never wrong - is the fallback.
    """
    try:
        import _json

        dumps, loads = _c_codec(_json)
        sample = {"type": "x", "a": [1, -2.5, "\u00e9\"\n", None, True, {}]}
        if loads(dumps(sample)) != sample:
            raise TypeError("_json does not round-trip")
        return dumps, loads
    except (ImportError, TypeError, AttributeError, ValueError):
        return _json_module_codec()


_codec = None


def _get_codec():
    global _codec
    if _codec is None:
        _codec = _make_codec()
    return _codec


def load_codec():
    """Load the JSON codec now (the runner does it while it waits for the first frame)."""
    _get_codec()


def encode(obj):
    """The payload bytes of ``obj``: compact JSON, always valid UTF-8.

    Non-ASCII text is UTF-8; NaN and infinities are refused (ValueError: not
    JSON); lone surrogates (possible in user strings) become '?', so the
    supervisor never sees invalid UTF-8 or an unpaired \\ud800 escape.
    """
    return _get_codec()[0](obj).encode("utf-8", "replace")


def decode(payload):
    """The JSON object in ``payload``; ProtocolError unless it is an object with a string type."""
    try:
        obj = _get_codec()[1](payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError("frame is not UTF-8 JSON: %s" % type(exc).__name__) from None
    if type(obj) is not dict:
        raise ProtocolError("frame is not a JSON object")
    if type(obj.get("type")) is not str:
        raise ProtocolError("frame has no string member 'type'")
    return obj


# Interrupts (docs/protocol.md, "Interrupting a cell"): the supervisor sends
# SIGINT to stop a running cell.  It becomes a KeyboardInterrupt in the cell's
# code, never in the runtime's own frame I/O (a frame cut in half would end
# the session) and never between cells.  [critical depth, pending, armed]
_interrupt = [0, False, False]


def on_sigint(signum, frame):
    """The SIGINT handler the runner installs."""
    if not _interrupt[2]:
        return  # no cell's code runs: nothing to interrupt
    if _interrupt[0]:
        _interrupt[1] = True  # raised when the frame I/O is done
        return
    raise KeyboardInterrupt


def arm_interrupt(armed):
    """True while the cell's own code runs."""
    _interrupt[2] = armed
    if not armed:
        _interrupt[1] = False


def enter_critical():
    _interrupt[0] += 1


def leave_critical():
    _interrupt[0] -= 1
    if _interrupt[0] == 0 and _interrupt[1] and _interrupt[2]:
        _interrupt[1] = False
        raise KeyboardInterrupt


class Channel:
    """Blocking frame I/O on one file descriptor (fd 3 in the sandbox)."""

    def __init__(self, fd):
        self.fd = fd
        self.pid = posix.getpid()
        # Children of the program (subprocess, os.system, fork+exec) must not
        # inherit the channel: one stray write would end the run.
        posix.set_inheritable(fd, False)

    # -- writing ---------------------------------------------------------------

    def send_payload(self, payload):
        if posix.getpid() != self.pid:
            # A fork()ed child of the program still running runtime code: the
            # channel belongs to the process the supervisor started.
            return
        header = len(payload).to_bytes(4, "big")
        _interrupt[0] += 1
        try:
            if len(payload) < 65536:
                self._write_all(header + payload)  # one write for the common small frame
            else:
                self._write_all(header)
                self._write_all(payload)
        finally:
            leave_critical()

    def send(self, obj):
        self.send_payload(encode(obj))

    def send_hello(self):
        # Formatted by hand: no JSON codec is loaded on the hello path.
        v = sys.version_info
        payload = ('{"type":"hello","protocol":%d,"python":"%d.%d.%d","pid":%d}'
                   % (PROTOCOL_VERSION, v[0], v[1], v[2], posix.getpid())).encode("ascii")
        self.send_payload(payload)

    def _write_all(self, data):
        view = memoryview(data)
        while view:
            try:
                n = posix.write(self.fd, view)
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            view = view[n:]

    # -- reading ---------------------------------------------------------------

    def recv(self):
        """The next frame as a dict, or None on a clean EOF (at a frame boundary)."""
        _interrupt[0] += 1
        try:
            header = self._read_exact(4, eof_ok=True)
            if header is None:
                return None
            length = int.from_bytes(header, "big")
            if length > MAX_INBOUND_BYTES:
                raise ProtocolError("frame of %d bytes exceeds the %d-byte limit"
                                    % (length, MAX_INBOUND_BYTES))
            return decode(self._read_exact(length, eof_ok=False))
        finally:
            leave_critical()

    def _read_exact(self, n, eof_ok):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = posix.readv(self.fd, [view[got:]])
            except OSError as exc:
                raise ProtocolError("read failed: %s" % exc) from None
            if k == 0:
                if got == 0 and eof_ok:
                    return None
                raise ProtocolError("EOF inside a frame (%d of %d bytes)" % (got, n))
            got += k
        return buf
