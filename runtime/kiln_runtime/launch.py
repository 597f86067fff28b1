"""The entry point of kiln's in-sandbox runtime.

The supervisor starts ``/usr/bin/python3 -I -S -B /opt/kiln/runtime/kiln_runtime/launch.py
[--preload m1,m2]`` with the runtime channel (a SOCK_STREAM socket) on fd 3 and
the capture pipes on fds 1 and 2 (docs/protocol.md, section 2).  The launcher
puts its package root first on ``sys.path`` (``-I`` adds neither the script's
directory nor the cwd), sends ``hello`` at once, does the little of ``site``'s
work programs rely on (``-S``: see ``_site``), and hands the channel to the
cell loop (runner.py), which waits for the first ``execute``.

The hello path is deliberately tiny: this file, protocol.py, and the modules
the interpreter has loaded before any code runs (``sys``, ``posix``; not even
``os`` under ``-S``).  Everything else is imported after hello has gone out.

Options: ``--preload m1,m2`` (imported on the first execute, inside the
sandbox's cgroup), ``--preload-before-hello`` (imported before hello instead,
with the runtime and warm.py's warm-up: a sandbox started ahead of its job, the
gVisor backend's warm pool), ``--workspace DIR`` (default /workspace: put on
sys.path when user code starts; its modules count as the program's own for the
import policy), ``--channel-on-stdin`` (the gVisor backend, docs/adr/0021: ``runsc``
passes only the standard streams into its sandbox, so the runtime channel
arrives as fd 0; the launcher moves it to fd 3 and puts /dev/null on fd 0, so
the program sees what it sees on the native jail), ``--seccomp-from-env`` (the
gVisor backend: kiln's own seccomp filter, the classic BPF program the
supervisor compiled for the native jail, arrives hex-encoded in
KILN_SECCOMP_BPF; the launcher removes the variable and installs the program
with prctl(PR_SET_SECCOMP) before anything else runs, so that the Sentry, which
implements seccomp, applies the same allow-list; failing to install it is fatal).
"""

import sys

import posix  # what os wraps on Linux; loaded by the interpreter, unlike os under -S

RUNTIME_FD = 3


def _channel_from_stdin():
    posix.dup2(0, RUNTIME_FD)
    null = posix.open("/dev/null", posix.O_RDONLY)
    if null != 0:
        posix.dup2(null, 0)
        posix.close(null)


SECCOMP_ENV = "KILN_SECCOMP_BPF"


def _install_seccomp_from_env():
    name = SECCOMP_ENV.encode()
    program = posix.environ.pop(name, None)
    posix.unsetenv(SECCOMP_ENV)
    if "os" in sys.modules:
        sys.modules["os"].environ.pop(SECCOMP_ENV, None)
    if not program:
        raise OSError("no %s" % SECCOMP_ENV)
    code = bytes.fromhex(program.decode("ascii"))
    if not code or len(code) % 8 != 0 or len(code) // 8 > 4096:
        raise OSError("%s is not a BPF program" % SECCOMP_ENV)
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(code, len(code))
    fprog = SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def _parse_args(args):
    preload, workspace, early = [], "/workspace", False
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if arg == "--preload-before-hello":
            early = True
            i += 1
            continue
        if arg == "--channel-on-stdin":
            _channel_from_stdin()
            i += 1
            continue
        if arg == "--seccomp-from-env":
            try:
                _install_seccomp_from_env()
            except (OSError, ValueError) as exc:
                raise ValueError("seccomp filter not installed: %s" % exc)
            i += 1
            continue
        if name in ("--preload", "--workspace") and not eq:
            if i + 1 >= len(args):
                raise ValueError("%s needs a value" % name)
            value = args[i + 1]
            i += 1
        if name == "--preload":
            preload.extend(m.strip() for m in value.split(",") if m.strip())
        elif name == "--workspace":
            workspace = value
        else:
            raise ValueError("unknown argument %r" % arg)
        i += 1
    return preload, workspace, early


def _package_root(path):
    """os.path.dirname(os.path.dirname(os.path.abspath(path))), without os."""
    if not path.startswith("/"):
        path = posix.getcwd() + "/" + path
    parts = []
    for part in path.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part and part != ".":
            parts.append(part)
    return "/" + "/".join(parts[:-2])


def _is_dir(path):
    try:
        return (posix.stat(path).st_mode & 0o170000) == 0o040000
    except (OSError, ValueError):
        return False


# -- what site would have done -----------------------------------------------------------

class _LazyPrinter:
    """``copyright``/``credits``/``license``: site's own ``_Printer``, built on first use
    (its constructor imports ``os``, which nothing else on the ok path needs)."""

    def __init__(self, *args):
        self._args = args
        self._printer = None

    def _real(self):
        if self._printer is None:
            import _sitebuiltins

            self._printer = _sitebuiltins._Printer(*self._args)
        return self._printer

    def __repr__(self):
        return repr(self._real())

    def __call__(self):
        return self._real()()


def _site():
    """The part of Debian's ``site`` the runtime keeps, for a ``-S`` interpreter.

    sys.path: the system interpreter's site directories, in site's order
    (site.getsitepackages() on Debian), those that exist.  No user site (``-I``
    disables it anyway) and no .pth processing: .pth files execute code at every
    start and are host-specific (a build host here has a _sandboxing_egress_ca.pth
    that is not Debian's and imports certifi).  Of the .pth files Debian's packages
    ship here, none adds a directory; matplotlib's nspkg.pth is reproduced below,
    and setuptools' distutils-precedence.pth is dropped (``import distutils`` gets
    the standard library's, deprecated in 3.11, not setuptools' copy).

    builtins: ``exit``/``quit`` (site's Quitter: close stdin, raise
    SystemExit(code)), ``help`` (site's _Helper: pydoc on call), and
    ``copyright``/``credits``/``license`` (site's _Printer, built lazily).
    """
    import builtins

    import _sitebuiltins  # frozen, imports only sys

    version = "python%d.%d" % sys.version_info[:2]
    prefix = sys.prefix
    sitedirs = [d for d in (prefix + "/local/lib/" + version + "/dist-packages",
                            prefix + "/lib/python3/dist-packages",
                            prefix + "/lib/" + version + "/dist-packages") if _is_dir(d)]
    for d in sitedirs:
        if d not in sys.path:
            sys.path.append(d)

    # matplotlib-*-nspkg.pth: Debian's mpl_toolkits/__init__.py declares a
    # namespace with pkg_resources (a 200 ms import); the .pth puts an
    # unexecuted module with the right __path__ in sys.modules instead.
    tool_dirs = [d + "/mpl_toolkits" for d in sitedirs if _is_dir(d + "/mpl_toolkits")]
    if tool_dirs and "mpl_toolkits" not in sys.modules:
        init = tool_dirs[0] + "/__init__.py"
        try:
            posix.stat(init)
        except OSError:
            pass  # a PEP 420 namespace package: the import system handles it
        else:
            # importlib.util's functions, without importlib.util's imports.
            from _frozen_importlib import module_from_spec
            from _frozen_importlib_external import spec_from_file_location

            spec = spec_from_file_location("mpl_toolkits", init,
                                           submodule_search_locations=tool_dirs)
            sys.modules["mpl_toolkits"] = module_from_spec(spec)

    eof = "Ctrl-D (i.e. EOF)"
    builtins.quit = _sitebuiltins.Quitter("quit", eof)
    builtins.exit = _sitebuiltins.Quitter("exit", eof)
    builtins.help = _sitebuiltins._Helper()
    builtins.copyright = _LazyPrinter("copyright", sys.copyright)
    builtins.credits = _LazyPrinter("credits", """\
    Thanks to CWI, CNRI, BeOpen.com, Zope Corporation and a cast of thousands
    for supporting Python development.  See www.python.org for more information.""")
    here = getattr(sys, "_stdlib_dir", None)
    files, dirs = ((["LICENSE.txt", "LICENSE"], [here + "/..", here, "."]) if here
                   else ((), ()))
    builtins.license = _LazyPrinter("license", "See https://www.python.org/psf/license/",
                                    files, dirs)


def main(argv):
    root = _package_root(__file__)
    if root in sys.path:
        sys.path.remove(root)
    sys.path.insert(0, root)
    try:
        preload, workspace, early = _parse_args(argv[1:])
    except ValueError as exc:
        sys.stderr.write("kiln runtime: %s\n" % exc)
        return 2

    from kiln_runtime import protocol

    if early:
        # A sandbox started ahead of its job (the gVisor backend's warm pool,
        # src/zygote/gvisor_pool.h): hello then means "the preloads are
        # imported", as a native zygote's fork has them.
        if sys.flags.no_site:
            _site()
        from kiln_runtime import warm

        warm.ahead_of_the_job(preload)

    try:
        channel = protocol.Channel(RUNTIME_FD)
        channel.send_hello()
    except (OSError, protocol.ChannelClosed) as exc:
        sys.stderr.write("kiln runtime: no runtime channel on fd %d (%s)\n" % (RUNTIME_FD, exc))
        return 125

    # While the supervisor reads hello and sends the first execute.
    if sys.flags.no_site and not early:
        _site()

    from kiln_runtime import runner

    # Registered before any of the program's handlers, so it runs after them
    # all (atexit is last in, first out; non-daemon threads were joined before).
    import atexit

    exit_code = []
    atexit.register(lambda: exit_code and runner.report_exit(channel, exit_code[0]))
    exit_code.append(runner.serve(channel, workspace, preload))
    return exit_code[0]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
