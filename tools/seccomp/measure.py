#!/usr/bin/python3
"""Measure the system calls sandboxed programs make once the seccomp filter is on.

Runs each workload in workloads/ through `kiln run` (cold) and `kiln run --pool`
under `strace -ff`, then keeps, for every traced process, the calls made after
its filter was installed: the calls after `seccomp(SECCOMP_SET_MODE_FILTER, ...)`
in the process that installed it, and every call of the processes it (or they)
forked afterwards. The supervisor's own calls and the setup before the filter are
left out. Prints the sorted set, one name per line, with the workloads that made
each call; `--out FILE` writes the names alone (src/isolation/testdata/).

A call the filter refuses still shows here (strace sees it before seccomp
answers), marked `refused N x` in the report: under the allow-list, a refusal
of anything but the calls refused on purpose (clone3, socket families other
than AF_UNIX) is a call the list lacks. The workload's own result is printed
too: a workload that fails is a finding of its own.

Usage: tools/seccomp/measure.py --kiln build/kiln [--out FILE] [--workload NAME ...]
Needs: root (strace follows into the sandbox's namespaces), strace.
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CALL = re.compile(r"^(?:<\.\.\. )?([a-z_0-9]+)(?:\(| resumed>)")
FILTER_ON = re.compile(r"^(?:seccomp\(SECCOMP_SET_MODE_FILTER|prctl\(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)"
                       r".*= 0$")
FORK = re.compile(r"^(?:clone3?|fork|vfork)\(.*= (\d+)(?: /\* (\d+) in strace's PID NS \*/)?$")
REFUSED = re.compile(r"= -1 (ENOSYS|EPERM|EAFNOSUPPORT) ")


def trace(kiln, workload, pool, workdir):
    out = os.path.join(workdir, "t")
    cmd = ["strace", "-ff", "-qq", "--decode-pids=pidns", "-s", "0", "-o", out, kiln, "run",
           "--timeout", "300", "--memory", "2g", "--pids", "512", "--json"]
    if pool:
        cmd.append("--pool")
    cmd.append(workload)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    return r.returncode, r.stdout[-2000:], r.stderr[-2000:]


def filtered_calls(workdir):
    """name -> count of refusals (or 0) for the calls made under a filter."""
    lines = {}
    for path in glob.glob(os.path.join(workdir, "t.*")):
        with open(path, errors="replace") as f:
            lines[int(path.rsplit(".", 1)[1])] = f.read().splitlines()
    filtered_from_start = set()
    changed = True
    seen = {}
    while changed:  # parents before children, whatever the file order
        changed = False
        for pid, body in lines.items():
            on = pid in filtered_from_start
            for line in body:
                if FILTER_ON.match(line):
                    on = True
                    continue
                m = FORK.match(line)
                if m and on:
                    child = int(m.group(2) or m.group(1))
                    if child not in filtered_from_start:
                        filtered_from_start.add(child)
                        changed = True
    calls = collections.Counter()
    refused = collections.Counter()
    for pid, body in lines.items():
        on = pid in filtered_from_start
        for line in body:
            if not on:
                on = bool(FILTER_ON.match(line))
                continue
            m = CALL.match(line)
            if not m or line.startswith(("+++", "---")):
                continue
            calls[m.group(1)] += 1
            if REFUSED.search(line):
                refused[m.group(1)] += 1
    return calls, refused


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out")
    ap.add_argument("--workload", action="append")
    args = ap.parse_args()
    if shutil.which("strace") is None:
        sys.exit("measure: strace is not installed (apt-get install strace)")
    names = args.workload or sorted(os.path.basename(p)[:-3]
                                    for p in glob.glob(os.path.join(HERE, "workloads", "*.py")))
    total = collections.defaultdict(set)
    refusals = collections.Counter()
    for name in names:
        path = os.path.join(HERE, "workloads", name + ".py")
        for pool in (False, True):
            label = name + (" (pool)" if pool else "")
            with tempfile.TemporaryDirectory() as workdir:
                rc, out, err = trace(os.path.abspath(args.kiln), path, pool, workdir)
                calls, refused = filtered_calls(workdir)
            print(f"# {label}: kiln exit {rc}, {len(calls)} distinct calls, "
                  f"{sum(calls.values())} in all", file=sys.stderr)
            if rc != 0:
                print(out, err, file=sys.stderr)
            for c in calls:
                total[c].add(label)
            refusals.update(refused)
    for c in sorted(total):
        mark = f"  refused {refusals[c]}x" if refusals[c] else ""
        print(f"{c:24} {len(total[c]):3} runs{mark}")
    if args.out:
        with open(args.out, "w") as f:
            f.write("# System calls made under the seccomp filter by tools/seccomp/workloads/,\n"
                    "# measured by tools/seccomp/measure.py (cold and pooled sandboxes).\n")
            f.write("".join(c + "\n" for c in sorted(total)))


if __name__ == "__main__":
    main()
