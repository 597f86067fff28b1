"""A zygote: the fork server of one profile's warm pool (docs/adr/0011-zygote.md).

The pool starts ``/usr/bin/python3 -I -S -B /opt/kiln/runtime/kiln_runtime/zygote.py
[--preload m1,m2]`` inside the profile's base jail (the cold path's mounts,
namespaces and root, with CAP_SETUID/CAP_SETGID of its own user namespace and
nothing else), with its control socket (SOCK_SEQPACKET) on fd 3.  It:

1. loads ``/opt/kiln/lib/libkiln_zygote.so`` (bound read-only into its jail) with ctypes;
2. lets the library read its configuration (sizes, rlimits, Landlock rights,
   the compiled seccomp filter);
3. imports the runtime and the preload list (matplotlib on Agg, through the
   runtime's backend), then ``gc.freeze()``: the children share those pages
   copy-on-write, and their collections never touch (and so never copy) them;
4. for each fork request, calls ``kiln_zygote_spawn()`` (or, if a preload
   started threads, ``os.fork()`` and ``kiln_zygote_child()`` in the child),
   which sets the sandbox up in C (its own namespaces, mounts, uid, cgroup, no
   capabilities, Landlock, seccomp) and returns 0 only in the sandbox's
   worker, which reseeds every random generator seeded at import and runs the
   runtime exactly as launch.py does: ``hello`` on fd 3, then cells
   (docs/protocol.md).  ``kiln_zygote_spawn`` runs the child's first process
   in this process's own memory (clone(CLONE_VM | CLONE_VFORK)), so the
   worker's fork is the sandbox's only copy of it.

The zygote holds no secret: it reads nothing but its own jail, and nothing
reaches it but the pool's fixed-size records.  It never runs a program.
"""

import sys

import posix

CONTROL_FD = 3
RUNTIME_FD = 3
# Bound read-only into the jail by the pool (mount_ns.h, kZygoteLibPath).
LIBRARY = "/opt/kiln/lib/libkiln_zygote.so"


def _parse_args(args):
    preload = []
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name != "--preload":
            raise ValueError("unknown argument %r" % args[i])
        if not eq:
            if i + 1 >= len(args):
                raise ValueError("--preload needs a value")
            value = args[i + 1]
            i += 1
        preload.extend(m.strip() for m in value.split(",") if m.strip())
        i += 1
    return preload


def _log(message):
    sys.stderr.write("kiln zygote: %s\n" % message)


def _reseed():
    """Every generator a sandbox could share with its siblings, seeded afresh.

    All siblings are forks of one process: whatever was seeded at import is the
    same in each.  ``random`` reseeds itself after os.fork() (its at-fork hook)
    and again here; numpy's legacy global RandomState (np.random.rand, ...) is
    reseeded from the OS; multiprocessing's authkey is made anew.  Generators
    created later (numpy's default_rng(), secrets, uuid4, tempfile names) read
    the OS's entropy themselves.  What cannot change after start-up: the str/bytes
    hash seed (PYTHONHASHSEED), shared by a zygote's children (docs/threat-model.md).
    """
    import random

    random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        try:
            process.current_process().authkey = posix.urandom(32)
        except Exception:  # noqa: BLE001
            pass


def _restore_signals():
    """The signal state a fresh interpreter starts with.

    The sandbox's setup (C, before any of this runs) reset every disposition to
    the default, under Python's feet: Python itself ignores SIGPIPE and SIGXFSZ
    (a write past RLIMIT_FSIZE is then EFBIG, not death) and turns SIGINT into
    KeyboardInterrupt; the zygote ignored SIGCHLD.  Re-apply what the
    interpreter's table says, with SIGCHLD back to the default.
    """
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if handler not in (None, signal.SIG_DFL):
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass


def _run_child(preload):
    """The sandbox's worker: signals and seeds afresh, then the runtime on fd 3 (as launch.py)."""
    _restore_signals()
    _reseed()
    from kiln_runtime import protocol, runner

    channel = protocol.Channel(RUNTIME_FD)
    try:
        channel.send_hello()
    except (OSError, protocol.ChannelClosed):
        posix._exit(125)
    code = runner.serve(channel, "/workspace", preload)
    # A normal exit would tear down every preloaded module, which writes to
    # (and so copies) most of the zygote's pages: run what a program may rely
    # on (atexit, non-daemon threads, flushed stdio) and leave.
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - a failing atexit handler is the program's
        pass
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:  # noqa: BLE001
            pass
    runner.report_exit(channel, code)
    posix._exit(code if isinstance(code, int) else 1)


def main(argv):
    # -I adds neither the script's directory nor the cwd: the package root first.
    root = __file__.rsplit("/", 2)[0]
    if root in sys.path:
        sys.path.remove(root)
    sys.path.insert(0, root)
    from kiln_runtime import launch
    try:
        preload = _parse_args(argv[1:])
    except ValueError as exc:
        sys.stderr.write("kiln zygote: %s\n" % exc)
        return 2

    import ctypes
    import gc
    import signal
    import socket

    control = socket.socket(fileno=CONTROL_FD)
    lib = ctypes.CDLL(LIBRARY)
    rc = lib.kiln_zygote_init(CONTROL_FD)
    if rc != 0:
        sys.stderr.write("kiln zygote: init: %s\n" % posix.strerror(-rc))
        return 2

    if sys.flags.no_site:
        launch._site()
    from kiln_runtime import warm

    failures = warm.preload(preload, _log)
    warm.warm_up(_log)
    # Forks are reaped by the kernel: a child's first process exits as soon as
    # the sandbox's pid 1 exists, and nothing here waits for it.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    gc.collect()
    gc.freeze()
    # One copy of this process per sandbox, not two: with a single thread, the
    # child's first process shares our memory (kiln_zygote_spawn) and only the
    # worker copies it; a preload that started threads (e.g. a BLAS pool when
    # the profile has several cpus) makes us fork as os.fork() does instead.
    spawn = None
    if lib.kiln_zygote_threads() == 1:
        # The children run os.register_at_fork's after-in-child hooks once every
        # layer is on and only their four fds are open; matplotlib's empties
        # its font cache, whose FT2Font objects close files the child no longer
        # has (and FreeType's state is per process): empty it here, with the
        # files still open, so that a child finds it empty as after os.fork().
        font_manager = sys.modules.get("matplotlib.font_manager")
        if font_manager is not None:
            font_manager._get_font.cache_clear()
            gc.collect()
        # PyDLL: the GIL stays held across the call, as os.fork() holds it
        # across fork(2); the worker returns from it holding the GIL too.
        spawn = ctypes.PyDLL(LIBRARY).kiln_zygote_spawn
        # What os.fork() does around fork(2): its before/after hooks (random's
        # reseed, threading's state), the import lock, the GIL in the child.
        before_fork = ctypes.pythonapi.PyOS_BeforeFork
        after_in_parent = ctypes.pythonapi.PyOS_AfterFork_Parent
        after_in_child = ctypes.pythonapi.PyOS_AfterFork_Child
        for f in (before_fork, after_in_parent, after_in_child):
            f.restype = None
    if lib.kiln_zygote_ready(CONTROL_FD, failures, 1 if spawn is not None else 0) != 0:
        return 2
    while True:
        got = lib.kiln_zygote_recv(CONTROL_FD)
        if got == 0:
            return 0  # the pool is gone
        if got < 0:
            sys.stderr.write("kiln zygote: fork request: %s\n" % posix.strerror(-got))
            return 2
        if spawn is not None:
            before_fork()
            pid = spawn()
            if pid == 0:
                after_in_child()
                control.detach()  # fd 3 is the runtime channel by now
                _run_child(preload)
            after_in_parent()
            if pid < 0:
                sys.stderr.write("kiln zygote: spawn: %s\n" % posix.strerror(-pid))
                return 2
        else:
            pid = posix.fork()
            if pid == 0:
                # The library closes every fd but the sandbox's four: forget the
                # control socket's object first, so it never closes a number that
                # is the runtime channel by then.
                control.detach()
                lib.kiln_zygote_child()  # returns only in the sandbox's worker
                _run_child(preload)
        lib.kiln_zygote_parent_close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
