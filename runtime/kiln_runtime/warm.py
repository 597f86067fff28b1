"""What a sandbox started ahead of its job imports and runs before it says hello.

Shared by the two warm pools: a native profile's zygote (zygote.py), whose
children are forks of it, and a gVisor profile's pooled sandbox (launch.py
``--preload-before-hello``), one interpreter per sandbox.  Both leave the
reporting of a preload that fails to the runner: it imports the list again at
the first execute and says so in that job's stderr (runner.Session._start).
"""

import sys


def preload(names, log):
    """Imports ``names`` and the runtime; returns how many failed, each named through ``log``."""
    failures = 0
    for name in names:
        try:
            __import__(name)
        except Exception as exc:  # noqa: BLE001 - reported, and retried at the first execute
            failures += 1
            log("--preload %s failed: %s: %s" % (name, type(exc).__name__, exc))
    # The runtime's own modules, so that a job imports nothing to say hello
    # and run its first cell.
    from kiln_runtime import display, policy, protocol, runner, tracebacks  # noqa: F401
    protocol.load_codec()
    if "matplotlib" in sys.modules:
        # pyplot and the Agg canvas behind the runtime's backend (MPLBACKEND),
        # which `import matplotlib.pyplot` in a cell would otherwise load.
        try:
            import matplotlib.pyplot  # noqa: F401
            from kiln_runtime import mpl_backend  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            failures += 1
            log("matplotlib.pyplot: %s: %s" % (type(exc).__name__, exc))
    return failures


def warm_up(log):
    """Runs, once and in a throwaway namespace, what a typical first cell's
    libraries do lazily on first use, so that every job finds it done (and, in
    a zygote's children, shared) instead of paying for it in its first cell: pandas imports most of
    what describe(), arithmetic and its reprs need only when first called, and
    matplotlib loads its font and renders its first figure slowly.  kiln's own
    fixed code, no thread started, nothing left behind (figures closed, no
    global bound).  A failure costs only the speed-up.
    """
    pd = sys.modules.get("pandas")
    if pd is not None:
        try:
            df = pd.DataFrame({"a": range(100), "b": [i * 0.5 for i in range(100)], "c": ["x"] * 100})
            d = df.describe()
            repr(d), d._repr_html_(), repr(df), df._repr_html_()  # noqa: B018
            repr(df["a"] * 2 + df["b"]), df.groupby("c").sum(), df.sort_values("b")  # noqa: B018
        except Exception as exc:  # noqa: BLE001
            log("pandas warm-up: %s: %s" % (type(exc).__name__, exc))
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        try:
            import io

            fig = plt.figure()
            plt.plot([1, 2, 3], [1, 4, 9], label="x")
            plt.title("t")
            plt.legend()
            fig.savefig(io.BytesIO(), format="png")
            plt.close("all")
        except Exception as exc:  # noqa: BLE001
            log("matplotlib warm-up: %s: %s" % (type(exc).__name__, exc))


def _ignore(message):
    del message


def ahead_of_the_job(names):
    """launch.py ``--preload-before-hello``: preload() and warm_up() with fds 1 and 2 on /dev/null.

    A pooled sandbox's output pipes carry its job's output and nothing else, so
    nothing printed while importing may reach them (a failed preload is reported
    by the first execute's retry, in that job's stderr).  Returns False, having
    imported nothing, when /dev/null cannot be opened.
    """
    import posix

    try:
        null = posix.open("/dev/null", posix.O_WRONLY | posix.O_CLOEXEC)
    except OSError:
        return False
    saved = (posix.dup(1), posix.dup(2))
    try:
        posix.dup2(null, 1)
        posix.dup2(null, 2)
        posix.close(null)
        preload(names, _ignore)
        warm_up(_ignore)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed or absent stream holds nothing
                pass
        posix.dup2(saved[0], 1)
        posix.dup2(saved[1], 2)
        posix.close(saved[0])
        posix.close(saved[1])
    return True
