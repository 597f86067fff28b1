#!/usr/bin/python3
"""Start-up overhead of `kiln run -c 'print(1)'` against bare /usr/bin/python3.

Run it with the system interpreter, standard library only:

    /usr/bin/python3 bench/run_bench.py --kiln ./build/kiln [--runs N] [--warmup W] [--json]

Candidates, each a command whose whole stdout must be "1":
  python3         /usr/bin/python3 -c 'print(1)'     (the baseline, absolute path)
  kiln            kiln run -c 'print(1)'             (default policy: every layer, cgroup on)
  bwrap-strict    bubblewrap, strict configuration   (only when bwrap is installed; no cgroup)
  kiln --json     kiln run --json -c 'print(1)'      (same run, gives kiln's per-phase times)

The candidates are interleaved round-robin (the starting candidate rotates each
round) so that the drift of a shared, noisy machine hits them all alike, and
every ratio below comes from this one run. The script measures and reports; it
does not pass or fail on a timing. It exits non-zero only when a candidate is
broken (wrong output, non-zero exit), because a broken candidate gives no number.
"""

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time

BARE_PYTHON = "/usr/bin/python3"  # never a PATH python (a pyenv one is first on PATH here)
CODE = "print(1)"
PHASES = ["plan", "cgroup", "clone", "maps", "child_setup", "exec", "attach", "start", "run", "teardown"]
PHASE_NOTES = {
    "plan": "policy -> child plan (BPF, mount plan, fds)",
    "cgroup": "create the cgroup, write its limits",
    "clone": "clone3 into the namespaces",
    "maps": "uid/gid maps written",
    "child_setup": "maps -> workspace fd (mounts, pivot)",
    "exec": "workspace fd -> worker about to execve",
    "attach": "v1 cgroup attach of pid 1 (overlaps the mounts)",
    "start": "execve -> program sent (interpreter start)",
    "run": "program sent -> worker exited",
    "teardown": "exit -> reaped, cgroup removed",
}


class Candidate:
    def __init__(self, name, argv, kind="plain"):
        self.name = name
        self.argv = argv
        self.kind = kind  # "plain": stdout must be "1"; "kiln-json": one JSON object
        self.times = []  # seconds, wall time of each measured invocation
        self.by_round = {}  # measured round -> seconds, for the paired ratio
        self.phases = {p: [] for p in PHASES}
        self.broken = None  # reason, once a run failed

    def command(self):
        return " ".join(shlex.quote(a) for a in self.argv)


def bwrap_argv(bwrap):
    """A strict bubblewrap configuration, comparable to kiln's layers (no cgroup:
    bwrap has none)."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for path in ("/etc/ld.so.cache", "/etc/alternatives"):
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--cap-drop", "ALL",
             "--chdir", "/tmp", BARE_PYTHON, "-c", CODE]
    return argv


def child_env():
    # The same environment for every candidate, without PYTHON* variables that
    # would change how the bare interpreter starts (kiln runs python3 -I anyway).
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def run_once(c, env, timeout):
    """Runs candidate c once. Returns (seconds, phases or None), or raises
    RuntimeError with the reason it is broken."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(c.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError("timed out after %.0f s" % timeout)
    except OSError as e:
        raise RuntimeError("cannot start: %s" % e)
    elapsed = time.perf_counter() - t0
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace").strip()
    if p.returncode != 0:
        raise RuntimeError("exit %d; stdout %r; stderr %r" % (p.returncode, out[:200], err[-400:]))
    if c.kind == "plain":
        if out.strip() != "1":
            raise RuntimeError("stdout %r, not '1'; stderr %r" % (out[:200], err[-400:]))
        return elapsed, None
    try:
        j = json.loads(out)
    except ValueError:
        j = None
    if not isinstance(j, dict):
        raise RuntimeError("stdout is not one JSON object: %r" % out[:200])
    if j.get("status") != "ok" or str(j.get("stdout", "")).strip() != "1":
        raise RuntimeError("status %r, program stdout %r, stderr %r"
                           % (j.get("status"), j.get("stdout"), j.get("stderr")))
    phases = j.get("phases_ms")
    return elapsed, phases if isinstance(phases, dict) else {}


def pct(values, q):
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def host_facts(kiln, env):
    facts = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "kernel": platform.release(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "loadavg_start": os.getloadavg(),
        "bench_python": sys.executable,
    }
    try:
        v = subprocess.run([BARE_PYTHON, "-c", "import sys; print(sys.version.split()[0])"],
                           stdout=subprocess.PIPE, env=env, timeout=30)
        facts["python"] = v.stdout.decode().strip()
    except (OSError, subprocess.SubprocessError):
        facts["python"] = "?"
    facts["cgroup"] = "?"
    try:
        d = subprocess.run([kiln, "doctor", "--json", "--no-smoke"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, env=env, timeout=60)
        report = json.loads(d.stdout)
        layers = report.get("layers", []) if isinstance(report, dict) else []
        for layer in layers:
            if isinstance(layer, dict) and layer.get("name") == "cgroup":
                facts["cgroup"] = "%s: %s" % (layer.get("state"), layer.get("detail"))
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        facts["cgroup"] = "kiln doctor failed: %s" % e
    return facts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True, help="path to the kiln binary (e.g. ./build/kiln)")
    ap.add_argument("--runs", type=int, default=50, help="measured rounds (default 50)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured rounds first (default 3)")
    ap.add_argument("--gap-ms", type=float, default=100.0,
                    help="idle time before each invocation (default 100 ms, well past the ~50 ms "
                         "after which a cgroup v1 attach is slow again: each run starts cold, "
                         "no candidate profits from the one before; 0 to run back to back)")
    ap.add_argument("--no-phases", action="store_true", help="skip the `kiln run --json` candidate")
    ap.add_argument("--no-bwrap", action="store_true", help="skip bubblewrap even if installed")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args()

    if os.path.realpath(sys.executable) != os.path.realpath(BARE_PYTHON):
        print("note: run me with %s, not %s" % (BARE_PYTHON, sys.executable), file=sys.stderr)
    kiln = os.path.abspath(args.kiln)
    if not os.access(kiln, os.X_OK):
        sys.exit("run_bench: %s is not an executable kiln binary" % args.kiln)
    if args.runs < 1 or args.warmup < 0:
        sys.exit("run_bench: --runs must be >= 1 and --warmup >= 0")

    env = child_env()
    reproduce = " ".join(shlex.quote(a) for a in
                         [BARE_PYTHON, os.path.relpath(os.path.abspath(sys.argv[0]))] + sys.argv[1:])
    facts = host_facts(kiln, env)

    cands = [Candidate("python3", [BARE_PYTHON, "-c", CODE]),
             Candidate("kiln", [kiln, "run", "-c", CODE])]
    skipped = {}
    bwrap = shutil.which("bwrap")
    if args.no_bwrap:
        skipped["bwrap-strict"] = "--no-bwrap"
    elif bwrap is None:
        skipped["bwrap-strict"] = "bwrap is not installed (apt-get install bubblewrap)"
    else:
        cands.append(Candidate("bwrap-strict", bwrap_argv(bwrap)))
        try:
            v = subprocess.run([bwrap, "--version"], stdout=subprocess.PIPE, timeout=10)
            facts["bwrap"] = v.stdout.decode().strip()
        except (OSError, subprocess.SubprocessError):
            pass
    if args.no_phases:
        skipped["kiln --json"] = "--no-phases"
    else:
        cands.append(Candidate("kiln --json", [kiln, "run", "--json", "-c", CODE], kind="kiln-json"))

    gap = args.gap_ms / 1000.0
    n = len(cands)
    t_start = time.perf_counter()
    for rnd in range(args.warmup + args.runs):
        measured = rnd >= args.warmup
        for k in range(n):
            c = cands[(rnd + k) % n]
            if c.broken:
                continue
            if gap > 0:
                time.sleep(gap)
            try:
                elapsed, phases = run_once(c, env, timeout=60)
            except RuntimeError as e:
                c.broken = str(e)
                continue
            if measured:
                c.times.append(elapsed)
                c.by_round[rnd] = elapsed
                if phases is not None:
                    for p in PHASES:
                        if isinstance(phases.get(p), (int, float)):
                            c.phases[p].append(float(phases[p]))
    facts["bench_seconds"] = round(time.perf_counter() - t_start, 1)
    facts["loadavg_end"] = os.getloadavg()

    base = cands[0]
    base_med = statistics.median(base.times) if base.times else None
    base_p90 = pct(base.times, 0.9) if base.times else None
    rows = []
    for c in cands:
        row = {"name": c.name, "command": c.command()}
        if c.broken:
            row["broken"] = c.broken
        elif c.times:
            med, p90 = statistics.median(c.times), pct(c.times, 0.9)
            row.update({"runs": len(c.times), "median_ms": med * 1e3, "p90_ms": p90 * 1e3,
                        "min_ms": min(c.times) * 1e3, "times_ms": [round(t * 1e3, 3) for t in c.times]})
            if base_med and not base.broken:
                row["ratio_median"] = med / base_med
                row["ratio_p90"] = p90 / base_p90
                paired = [t / base.by_round[k] for k, t in c.by_round.items() if k in base.by_round]
                if paired:
                    row["ratio_paired"] = statistics.median(paired)
        rows.append(row)
    phase_rows = {}
    for c in cands:
        if c.kind == "kiln-json" and not c.broken and c.times:
            phase_rows = {p: statistics.median(v) for p, v in c.phases.items() if v}

    report = {"facts": facts, "settings": {"runs": args.runs, "warmup": args.warmup,
                                           "gap_ms": args.gap_ms, "code": CODE},
              "reproduce": reproduce, "candidates": rows, "skipped": skipped,
              "kiln_phases_median_ms": phase_rows}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 1 if any(c.broken for c in cands) else 0


def print_report(r):
    f = r["facts"]
    print("kiln start-up bench, %s" % f["date"])
    print("host: kernel %s, %s CPUs (%s usable), /usr/bin/python3 %s, load %s -> %s"
          % (f["kernel"], f["cpu_count"], f["cpus_usable"], f["python"],
             " ".join("%.2f" % x for x in f["loadavg_start"]),
             " ".join("%.2f" % x for x in f["loadavg_end"])))
    print("cgroup (kiln doctor): %s" % f["cgroup"])
    if "bwrap" in f:
        print("bwrap: %s" % f["bwrap"])
    s = r["settings"]
    print("%d measured rounds after %d warm-up, round-robin, %g ms idle before each invocation, "
          "%.1f s in all" % (s["runs"], s["warmup"], s["gap_ms"], f["bench_seconds"]))
    print()
    print("%-13s %5s %9s %9s %9s %8s %8s %8s" % ("candidate", "runs", "median", "p90", "min",
                                                  "x med", "x p90", "x pair"))
    for row in r["candidates"]:
        if "broken" in row:
            print("%-13s BROKEN, no number: %s" % (row["name"], row["broken"]))
            continue
        ratio = ("%7.2fx %7.2fx %7.2fx" % (row["ratio_median"], row["ratio_p90"], row["ratio_paired"])
                 if "ratio_median" in row else "      -        -        -")
        print("%-13s %5d %7.1fms %7.1fms %7.1fms %s" % (row["name"], row["runs"], row["median_ms"],
                                                       row["p90_ms"], row["min_ms"], ratio))
    for name, why in r["skipped"].items():
        print("%-13s skipped: %s" % (name, why))
    print("(x med, x p90: ratio of the candidate's median, p90 to bare /usr/bin/python3's; x pair: "
          "median over rounds of the ratio within one round. Target in the issue: kiln <= 1.15x)")
    if r["kiln_phases_median_ms"]:
        print()
        print("kiln phases (median over the `kiln run --json` runs, ms; from its phases_ms):")
        for p in PHASES:
            if p in r["kiln_phases_median_ms"]:
                print("  %-12s %7.2f   %s" % (p, r["kiln_phases_median_ms"][p], PHASE_NOTES[p]))
    print()
    print("commands:")
    for row in r["candidates"]:
        print("  %-13s %s" % (row["name"], row["command"]))
    print("reproduce: %s" % r["reproduce"])


if __name__ == "__main__":
    sys.exit(main())
