"""The cell loop: the runtime side of docs/protocol.md, section 2.

Imported right after the hello frame has gone out.  Per ``execute``:

1. the first one imports the ``--preload`` modules (inside the cgroup, see the
   protocol), injects ``display`` into builtins and puts the workspace at
   ``sys.path[0]``, as ``python3 script.py`` would;
2. ``execution_count`` goes up by one for every execute request, whatever its
   outcome (IPython's rule for non-silent requests: a SyntaxError or a policy
   violation also consumes a number);
3. the cell is parsed (SyntaxError: an ``error`` frame, nothing runs), its
   imports are checked against the policy (violation: a ``policy_violation``
   frame, nothing runs), and it is compiled with the request's filename;
4. if its last statement is an expression, the rest runs with ``exec`` and
   that expression with ``eval``, in the persistent ``__main__`` namespace; the
   value is shown unless it is None or the cell's last token is ``;``
   (IPython's rule);
5. figures still open are sent (display_data) and closed, then the value
   (execute_result), the ``error`` or ``policy_violation``, and last
   ``execute_reply``.  stdout/stderr are flushed before every frame, so the
   supervisor sees the cell's text before the frames that follow it.

``execute_reply.exit_code`` is always an integer: the code the runtime would
exit with if shut down now (0 after ok, 1 after error or policy_violation, the
SystemExit code after exit).  On ``shutdown`` or EOF the runtime exits with it.
A malformed frame from the supervisor ends the runtime with one line on stderr
and exit code 125.

An ok cell imports nothing beyond this package and the builtin ``_ast``: no
``ast``, ``tokenize``, ``__future__``, ``linecache`` or ``traceback`` (and so no
``re`` or ``enum``), not even ``os``.  The error path imports what it needs with
``kiln_runtime.runtime_import``, which keeps the program's modules (a
workspace's ``traceback.py``) out of the runtime's way, as importing them all
before the workspace joined ``sys.path`` used to.
"""

import _ast
import posix
import sys

import kiln_runtime
from kiln_runtime import policy, protocol

EXIT_PROTOCOL_ERROR = 125

_COMPILE_ERRORS = (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError)
_FRAME_BUDGET = protocol.MAX_OUTBOUND_BYTES - (64 << 10)
_TEXT_CUT = 1 << 20  # characters of text/plain kept from an execute_result over the budget
_ENTRY_CUT = 16 << 10  # characters kept per traceback entry of an error over the budget


def _flush_stdio():
    for name in ("stdout", "stderr"):
        for stream in (getattr(sys, name, None), getattr(sys, "__%s__" % name, None)):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - None, closed, or a user object without flush
                pass


class _OrderedFd(object):
    """The raw writer under sys.stdout / sys.stderr (fds 1 and 2).

    Two pipes lose the order between them: when a cell writes "a" to stdout,
    "b" to stderr, "c" to stdout faster than the supervisor reads, it sees
    "a c" and "b".  So the first write to one stream after the other one
    wrote flushes the other's text, sends a ``sync`` frame and waits for
    ``synced``: by then the supervisor has read both pipes up to here.  Costs
    one round trip per switch, none per line.  Writes straight to fds 1 and 2
    (C extensions, child processes) are not ordered this way.
    """

    def __init__(self, fd, state):
        self.fd = fd
        self.state = state  # shared: {"last", "channel", "lock", "pid", "streams"}

    def write(self, data):
        st = self.state
        if st["last"] not in (None, self.fd) and posix.getpid() == st["pid"]:
            other = st["streams"].get(st["last"])
            st["last"] = self.fd
            try:
                if other is not None:
                    other.flush()
            except Exception:  # noqa: BLE001 - a closed or replaced stream
                pass
            with st["lock"]:
                protocol.enter_critical()  # the round trip is one unit for interrupts
                try:
                    st["channel"].send({"type": "sync"})
                    reply = st["channel"].recv()
                finally:
                    protocol.leave_critical()
            if not isinstance(reply, dict) or reply.get("type") != "synced":
                _fatal("expected a synced frame, got %r" % (reply,))
        st["last"] = self.fd
        view = memoryview(data)
        total = len(view)
        while view:
            n = posix.write(self.fd, view)
            view = view[n:]
        return total


def _install_ordered_stdio(channel, lock):
    import io

    state = {"last": None, "channel": channel, "lock": lock, "pid": posix.getpid(), "streams": {}}
    for fd, name, errors in ((1, "stdout", "strict"), (2, "stderr", "backslashreplace")):
        old = getattr(sys, name, None)
        try:
            if old is not None:
                old.flush()
        except Exception:  # noqa: BLE001
            pass

        class _Raw(io.RawIOBase):
            def __init__(self, ordered):
                super().__init__()
                self._ordered = ordered

            def writable(self):
                return True

            def write(self, b):
                return self._ordered.write(b)

            def fileno(self):
                return self._ordered.fd

            def isatty(self):
                return False

        raw = _Raw(_OrderedFd(fd, state))
        stream = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors=errors,
                                  line_buffering=True, write_through=(fd == 2))
        state["streams"][fd] = stream
        setattr(sys, name, stream)


def _fatal(message, code=EXIT_PROTOCOL_ERROR):
    """One line on stderr and out: no traceback, no atexit, no user finalizers."""
    _flush_stdio()
    try:
        posix.write(2, ("kiln runtime: %s\n" % message).encode("utf-8", "replace"))
    finally:
        posix._exit(code)


def _cut(text, limit):
    if len(text) <= limit:
        return text
    return text[:limit] + "\n... [kiln: %d more characters not shown]" % (len(text) - limit)


def _shrink(frame):
    """A smaller version of a frame over the supervisor's frame limit, or None to drop it."""
    kind = frame["type"]
    if kind == "execute_result":
        text = frame["data"].get("text/plain", "")
        return dict(frame, data={"text/plain": _cut(text, _TEXT_CUT)}, metadata={})
    if kind == "error":
        tb = frame["traceback"]
        if len(tb) > 100:
            tb = tb[:50] + ["... [kiln: %d entries not shown]" % (len(tb) - 100)] + tb[-50:]
        return dict(frame, evalue=_cut(frame["evalue"], _ENTRY_CUT),
                    traceback=[_cut(entry, _ENTRY_CUT) for entry in tb])
    if kind == "policy_violation":
        return dict(frame, module=_cut(frame["module"], 1024),
                    message=_cut(frame["message"], _ENTRY_CUT))
    return None


# The compiler flags of every __future__ feature (the OR of
# __future__.<feature>.compiler_flag; a test checks it against __future__), so
# that the __future__ module itself need not be imported.
FUTURE_FLAGS = 0x1FE0010

_SOURCE_WHITESPACE = " \t\f\n"


def _ends_with_semicolon(code, stmt):
    """IPython's rule: the cell's last token (comments and newlines aside) is ``;``.

    ``stmt`` is the cell's last statement: only ``;``, whitespace, comments and
    backslash continuations can follow where it ends.  A backslash not followed by
    a newline (or anything else unexpected) counts as "no ``;``": the value shows.
    """
    # Lines as the tokenizer numbers them: \r\n, \r and \n end a line (str.splitlines
    # would also split at \f, \v, \x1c, \u2028...).
    if "\r" in code:
        code = code.replace("\r\n", "\n").replace("\r", "\n")
    # The start of line end_lineno, found from the end: the last statement ends
    # on one of the last lines.
    start = len(code)
    for _ in range(code.count("\n") - stmt.end_lineno + 2):
        start = code.rfind("\n", 0, start)
    start += 1
    stop = code.find("\n", start)
    line = code[start:] if stop == -1 else code[start:stop]
    col = stmt.end_col_offset  # in UTF-8 bytes
    if not line.isascii():
        col = len(line.encode("utf-8")[:col].decode("utf-8", "replace"))
    i, n = start + col, len(code)
    semicolon = False
    while i < n:
        c = code[i]
        if c in _SOURCE_WHITESPACE:
            i += 1
        elif c == ";":
            semicolon = True
            i += 1
        elif c == "#":
            i = code.find("\n", i)
            if i == -1:
                break
        elif c == "\\" and code.startswith("\n", i + 1):
            i += 2
        else:
            return False
    return semicolon


def _workspace_path(workspace, filename):
    """os.path.join(workspace, filename), without os."""
    if filename.startswith("/") or not workspace:
        return filename
    return workspace + filename if workspace.endswith("/") else workspace + "/" + filename


class _LinecacheFiller:
    """Gives ``linecache`` the cells' sources the moment something imports it.

    A meta path finder at the front of ``sys.meta_path`` until ``linecache`` is
    imported (by a warning, ``inspect``, ``traceback``, the runtime's error
    path...): it wraps that module's loader to fill ``linecache.cache`` with the
    latest cell of each filename right after the module has run, then steps out.
    The runtime used to import linecache (and with it tokenize, re and enum) on
    the first cell just to store each cell's lines there.
    """

    def __init__(self, entries):
        self.entries = entries  # filename -> linecache entry

    def find_spec(self, name, path=None, target=None):
        if name != "linecache":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _LinecacheLoader(spec.loader, self.entries)
        return spec


class _LinecacheLoader:
    def __init__(self, loader, entries):
        self.loader = loader
        self.entries = entries

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # The module and its spec name the real loader, as if this one never was.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        cache = module.__dict__.get("cache")
        if type(cache) is dict:
            cache.update(self.entries)


def _exit_code(exc):
    """The process exit code for SystemExit(code), printing a non-int code like Python."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 63) <= code < (1 << 63) else 255
    try:
        sys.stderr.write("%s\n" % (code,))
    except Exception:  # noqa: BLE001
        pass
    return 1


def parse_execute(msg):
    """The validated members of an execute frame; ValueError if one has the wrong type."""
    cell = msg.get("cell")
    code = msg.get("code")
    if type(cell) is not int:
        raise ValueError("execute.cell is not an integer")
    if type(code) is not str:
        raise ValueError("execute.code is not a string")
    filename = msg.get("filename", "<cell>")
    if type(filename) is not str:
        raise ValueError("execute.filename is not a string")
    limits = msg.get("limits")
    if limits is None:
        limits = {}
    if type(limits) is not dict:
        raise ValueError("execute.limits is not an object")
    caps = []
    for key, default in (("max_images", 16), ("max_image_bytes", 8 << 20)):
        value = limits.get(key, default)
        if type(value) is not int or value < 0:
            raise ValueError("execute.limits.%s is not a non-negative integer" % key)
        caps.append(value)
    context = msg.get("context", "default")
    if type(context) is not str or not context:
        raise ValueError("execute.context is not a non-empty string")
    resets = msg.get("reset_contexts", [])
    if type(resets) is not list or any(type(c) is not str for c in resets):
        raise ValueError("execute.reset_contexts is not a list of strings")
    cwd = msg.get("cwd")
    if cwd is not None and (type(cwd) is not str or not cwd.startswith("/") or "\0" in cwd):
        raise ValueError("execute.cwd is not an absolute path")
    return {
        "cell": cell,
        "code": code,
        "filename": filename or "<cell>",
        "policy": policy.Policy.from_request(msg.get("import_policy")),
        "max_images": caps[0],
        "max_image_bytes": caps[1],
        "context": context,
        "reset_contexts": resets,
        "env": _string_map(msg, "env", "execute.env"),
        "command": _parse_command(msg.get("command")),
        "cwd": cwd,
    }


def _string_map(obj, key, what):
    value = obj.get(key)
    if value is None:
        return {}
    if type(value) is not dict or any(type(k) is not str or type(v) is not str
                                      for k, v in value.items()):
        raise ValueError("%s is not an object of strings" % what)
    for k, v in value.items():
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise ValueError("%s has a bad variable %r" % (what, k[:64]))
    return value


def _parse_command(command):
    """execute.command: {argv: [str, ...], cwd: str or null, env: {str: str}} or None."""
    if command is None:
        return None
    if type(command) is not dict:
        raise ValueError("execute.command is not an object")
    argv = command.get("argv")
    if (type(argv) is not list or not argv or
            any(type(a) is not str or "\0" in a for a in argv)):
        raise ValueError("execute.command.argv is not a non-empty list of strings")
    cwd = command.get("cwd")
    if cwd is not None and (type(cwd) is not str or not cwd or "\0" in cwd):
        raise ValueError("execute.command.cwd is not a non-empty string")
    return {"argv": argv, "cwd": cwd, "env": _string_map(command, "env", "execute.command.env")}


class Session:
    """The interpreter state across cells: one ``__main__``, one execution counter."""

    def __init__(self, channel, workspace="/workspace", preload=()):
        import _thread
        import builtins

        self.channel = channel
        self.pid = posix.getpid()
        self.workspace = workspace
        self.preload = [name for name in preload if name]
        self.started = False
        self.moved_to_cwd = False  # execute.cwd was applied (once)
        self.execution_count = 0
        self.exit_code = 0
        self.flags = 0  # __future__ flags the cells have switched on
        self.sources = {}  # id(code object of a cell) -> (code, lines)
        # filename -> linecache entry of the latest cell with that filename, for
        # linecache once something imports it (_LinecacheFiller).
        self.linecache_entries = {}
        self._lock = _thread.allocate_lock()
        # Holds the policy setter; deliberately not a module global (see policy.py).
        self._policy_setter = None

        main = type(sys)("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        self.ns = self.main_ns = main.__dict__
        sys.argv = [""]
        # Code contexts (docs/protocol.md, "execute"): "default" is __main__;
        # each other one is a namespace of its own with its own execution
        # count, made on the first cell that names it.  The context not
        # running now: id -> [namespace, execution_count, its fresh contents].
        self.context = "default"
        self.contexts = {}
        self.fresh = dict(self.ns)  # what a reset leaves in a namespace

    # -- frames ----------------------------------------------------------------------

    def send(self, frame):
        """Flush stdio and send ``frame``.

        Returns the frame sent (shrunk if over the frame limit) or None (dropped).
        """
        _flush_stdio()
        try:
            payload = protocol.encode(frame)
        except (TypeError, ValueError, RecursionError):
            if frame["type"] in ("display_data", "execute_result"):
                return None
            raise
        if len(payload) > _FRAME_BUDGET:
            shrunk = _shrink(frame)
            payload = protocol.encode(shrunk) if shrunk is not None else b""
            if shrunk is None or len(payload) > _FRAME_BUDGET:
                if frame["type"] in ("display_data", "execute_result"):
                    try:
                        sys.stderr.write("kiln: an output too large for a frame was dropped\n")
                    except Exception:  # noqa: BLE001
                        pass
                    _flush_stdio()
                    return None
                shrunk = dict(frame, evalue=_cut(frame.get("evalue", ""), 1024), traceback=[])
                payload = protocol.encode(shrunk)
            frame = shrunk
        with self._lock:  # display() from a thread must not interleave with the runner
            self.channel.send_payload(payload)
        return frame

    # -- the first execute ---------------------------------------------------------------

    def _start(self):
        import builtins

        for name in self.preload:
            try:
                __import__(name)
            except Exception as exc:  # noqa: BLE001 - a missing preload is not fatal
                sys.stderr.write("kiln: --preload %s failed: %s: %s\n"
                                 % (name, type(exc).__name__, exc))
        from kiln_runtime import display

        builtins.display = display.display
        # The runtime's matplotlib backend is importable only here: children
        # (subprocess, os.system) get Agg through the C environment, while this
        # process's os.environ keeps the module backend for matplotlib.  (Before
        # os is imported, os.environ is yet to be built from posix.environ, which
        # putenv does not change.)
        os_module = sys.modules.get("os")
        if os_module is not None:
            backend = os_module.environ.get("MPLBACKEND", "")
        else:
            backend = posix.environ.get(b"MPLBACKEND", b"").decode("utf-8", "replace")
        if backend.startswith("module://kiln_runtime."):
            posix.putenv("MPLBACKEND", "agg")
        # stdout and stderr keep their order (docs/protocol.md, "sync"): both
        # are line-buffered, and the first write after the other stream wrote
        # waits until the supervisor has drained both pipes.
        _install_ordered_stdio(self.channel, self._lock)
        # The runtime's late imports (the error path's traceback, ...) keep to
        # sys.path as it is now, without the program's directories.
        kiln_runtime.runtime_path = list(sys.path)
        if "linecache" not in sys.modules:
            sys.meta_path.insert(0, _LinecacheFiller(self.linecache_entries))
        # User code starts now: the workspace comes first, like `python3 script.py`.
        sys.path.insert(0, self.workspace)
        self.started = True

    # -- one cell ------------------------------------------------------------------------

    # -- contexts, the cell's environment ------------------------------------------

    def _reset_contexts(self, names):
        """Empties each named context (E2B's restart/remove): cleared in place, so
        that the policy hook still knows __main__'s namespace."""
        for name in names:
            if name == self.context:
                self.ns.clear()
                self.ns.update(self.fresh)
                self.execution_count = 0
            else:
                self.contexts.pop(name, None)

    def _use_context(self, name):
        if name == self.context:
            return
        self.contexts[self.context] = (self.ns, self.execution_count)
        if name in self.contexts:
            self.ns, self.execution_count = self.contexts.pop(name)
        else:
            import builtins

            self.ns = {"__name__": "__main__", "__doc__": None, "__builtins__": builtins}
            self.execution_count = 0
        self.context = name

    def _set_env(self, env):
        """Sets the cell's variables in os.environ; returns what restores them."""
        if not env:
            return None
        os_module = kiln_runtime.runtime_import("os")
        saved = [(k, os_module.environ.get(k)) for k in env]
        os_module.environ.update(env)
        return os_module, saved

    def _restore_env(self, token):
        if token is None:
            return
        os_module, saved = token
        for k, v in saved:
            if v is None:
                os_module.environ.pop(k, None)
            else:
                os_module.environ[k] = v

    def execute(self, req):
        if not self.started:
            self._start()
        self._reset_contexts(req["reset_contexts"])
        if req["cwd"] is not None and not self.moved_to_cwd:
            # The session's starting directory (E2B's home): entered once, so
            # that a cell's own os.chdir() lasts, as in a notebook.
            self.moved_to_cwd = True
            try:
                posix.chdir(req["cwd"])
            except OSError as exc:
                self.send({"type": "error", "cell": req["cell"], "ename": type(exc).__name__,
                           "evalue": str(exc), "traceback": []})
                self.send({"type": "execute_reply", "cell": req["cell"], "status": "error",
                           "execution_count": None, "exit_code": 1, "dropped": 0})
                return
        if req["command"] is not None:
            status, code = self._run_command(req)
            if posix.getpid() != self.pid:
                posix._exit(code)
            self.send({"type": "execute_reply", "cell": req["cell"], "status": status,
                       "execution_count": None, "exit_code": code, "dropped": 0})
            return
        self._use_context(req["context"])
        env = self._set_env(req["env"])
        try:
            self._execute_cell(req)
        finally:
            self._restore_env(env)

    def _run_command(self, req):
        """Runs execute.command (E2B's commands.run: /bin/bash -l -c CMD) as a child of
        this process, so in the sandbox: its output goes to fds 1 and 2, its stdin
        is /dev/null.  ("command", its exit code: 128 + N when signal N ended it),
        or ("error", 1) with an error frame when it could not start or the cell
        was interrupted (then the command's process group is killed)."""
        command = req["command"]
        subprocess = kiln_runtime.runtime_import("subprocess")
        os_module = kiln_runtime.runtime_import("os")
        env = dict(os_module.environ)
        env.update(req["env"])
        env.update(command["env"])
        _flush_stdio()
        try:
            proc = subprocess.Popen(command["argv"], cwd=command["cwd"] or self.workspace, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            self.send({"type": "error", "cell": req["cell"], "ename": type(exc).__name__,
                       "evalue": str(exc), "traceback": []})
            return "error", 1
        self.send({"type": "command_started", "cell": req["cell"], "pid": proc.pid})
        try:
            protocol.arm_interrupt(True)
            try:
                returncode = proc.wait()
            finally:
                protocol.arm_interrupt(False)
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt: the cell is stopped
            try:
                os_module.killpg(proc.pid, 9)
            except OSError:
                pass
            proc.wait()
            self.send({"type": "error", "cell": req["cell"], "ename": type(exc).__name__,
                       "evalue": str(exc), "traceback": []})
            return "error", 1
        return "command", returncode if returncode >= 0 else 128 - returncode

    def _execute_cell(self, req):
        from kiln_runtime import display

        self.execution_count += 1
        number = self.execution_count
        sink = display.begin_cell(self.send, req["cell"], req["max_images"],
                                  req["max_image_bytes"])
        try:
            status, code = self._run(req, number, sink)
        finally:
            display.end_cell()
        if posix.getpid() != self.pid:
            # A fork()ed child of the cell ran to its end: it ends here, like the
            # end of a script, and never reads the parent's channel.
            _flush_stdio()
            posix._exit(code)
        self.exit_code = code
        self.send({"type": "execute_reply", "cell": req["cell"], "status": status,
                   "execution_count": number, "exit_code": code, "dropped": sink.dropped})

    def _set_linecache(self, filename, entry):
        """linecache.cache[filename] = entry, now if linecache is loaded, else once it is."""
        self.linecache_entries[filename] = entry
        module = sys.modules.get("linecache")
        if module is not None:
            try:
                cache = module.__dict__.get("cache")
            except Exception:  # noqa: BLE001 - not a module
                cache = None
            if type(cache) is dict:
                cache[filename] = entry

    def _register(self, code, lines):
        todo = [code]
        while todo:
            co = todo.pop()
            self.sources[id(co)] = (co, lines)
            todo.extend(c for c in co.co_consts if type(c) is type(co))

    def _prepare_namespace(self, filename):
        if filename.startswith("<"):
            self.ns.pop("__file__", None)
        else:
            # Like `python3 script.py` (3.9+): an absolute __file__, argv[0] as given.
            self.ns["__file__"] = _workspace_path(self.workspace, filename)
            sys.argv[0:1] = [filename]

    def _run(self, req, number, sink):
        code, filename, pol = req["code"], req["filename"], req["policy"]
        lines = code.splitlines(True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        self._set_linecache(filename, (len(code), None, lines, filename))

        try:
            tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST | self.flags,
                           dont_inherit=True)
            violation = policy.check_tree(tree, pol)
            if violation is not None:
                module, line, message = violation
                self.send({"type": "policy_violation", "cell": req["cell"], "module": module,
                           "line": line, "message": message})
                return "policy_violation", 1
            last = None
            body = tree.body
            if body and type(body[-1]) is _ast.Expr and not _ends_with_semicolon(
                    code, body[-1]):
                last = _ast.Expression(body.pop().value)
            body_code = compile(tree, filename, "exec", self.flags, dont_inherit=True)
            last_code = None
            if last is not None:
                last_code = compile(last, filename, "eval", self.flags, dont_inherit=True)
        except _COMPILE_ERRORS as exc:
            self._send_error(req, exc)
            return "error", 1

        self.flags |= body_code.co_flags & FUTURE_FLAGS
        self._register(body_code, lines)
        if last_code is not None:
            self._register(last_code, lines)
        self._prepare_namespace(filename)
        if self._policy_setter is None and not pol.is_open:
            self._policy_setter = policy.install_hook(self.main_ns, self.workspace)
        if self._policy_setter is not None:
            self._policy_setter(pol)

        from kiln_runtime import display

        ns = self.ns
        result = None
        try:
            protocol.arm_interrupt(True)
            try:
                exec(body_code, ns)
                value = eval(last_code, ns) if last_code is not None else None
            finally:
                protocol.arm_interrupt(False)
            if value is not None:
                result = display.build_bundle(value)
                ns["_"] = value
        except SystemExit as exc:
            code = _exit_code(exc)
            self._flush_figures()
            return "exit", code
        except BaseException as exc:  # noqa: BLE001 - every error of the cell is reported
            self._flush_figures()
            return self._report(req, exc)
        self._flush_figures()
        if result is not None:
            sink.publish(result[0], result[1], execution_count=number)
        return "ok", 0

    def _flush_figures(self):
        if "matplotlib.pyplot" not in sys.modules:
            return
        from kiln_runtime import display

        try:
            display.flush_figures(end_of_cell=True)
        except Exception as exc:  # noqa: BLE001 - the cell's own outcome stands
            display._warn("showing the open figures", exc)

    def _report(self, req, exc):
        if isinstance(exc, policy.KilnPolicyError):
            line = exc.lineno or 0
            tb = exc.__traceback__
            while tb is not None:
                if id(tb.tb_frame.f_code) in self.sources:
                    line = tb.tb_lineno
                tb = tb.tb_next
            message = str(exc)
            if exc.filename and not exc.filename.startswith("<"):
                message += " (in %s, line %s)" % (exc.filename, exc.lineno)
            self.send({"type": "policy_violation", "cell": req["cell"], "module": exc.module,
                       "line": line, "message": message})
            return "policy_violation", 1
        self._send_error(req, exc)
        return "error", 1

    def _send_error(self, req, exc):
        from kiln_runtime import tracebacks

        ename, evalue, tb = tracebacks.format_exception(exc, self.sources)
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
        self.send({"type": "error", "cell": req["cell"], "ename": ename, "evalue": evalue,
                   "traceback": tb})


def report_exit(channel, code):
    """The last frame: ``exiting`` with the process's exit code, sent once the
    program's own exit work is done (non-daemon threads joined, atexit run,
    stdio flushed).  The supervisor may answer its caller from here on and
    need not wait for the interpreter's teardown (docs/protocol.md)."""
    _flush_stdio()
    try:
        channel.send({"type": "exiting", "exit_code": code if isinstance(code, int) else 1})
    except Exception:  # noqa: BLE001 - the supervisor is gone: the exit status will tell
        pass


def serve(channel, workspace="/workspace", preload=()):
    """Run cells until shutdown or EOF; returns the exit code."""
    session = Session(channel, workspace, preload)
    import _signal

    # SIGINT interrupts the running cell only (protocol.on_sigint).
    _signal.signal(_signal.SIGINT, protocol.on_sigint)
    # The first frame needs it anyway: load it while the supervisor gets that ready.
    protocol.load_codec()
    while True:
        try:
            msg = channel.recv()
        except protocol.ProtocolError as exc:
            _fatal("protocol error: %s" % exc)
        if msg is None:
            break
        kind = msg["type"]
        if kind == "shutdown":
            break
        if kind != "execute":
            _fatal("protocol error: unexpected frame type %r" % kind[:64])
        try:
            req = parse_execute(msg)
        except ValueError as exc:
            _fatal("protocol error: %s" % exc)
        try:
            session.execute(req)
        except protocol.ChannelClosed as exc:
            _fatal("the runtime channel is closed (%s)" % exc)
    _flush_stdio()
    return session.exit_code
