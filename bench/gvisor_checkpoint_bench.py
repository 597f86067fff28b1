#!/usr/bin/python3
"""Does `runsc checkpoint` / `runsc restore` beat a cold gVisor start here? (issue 16, ADR 0021)

    /usr/bin/python3 bench/gvisor_checkpoint_bench.py [--runs 5] [--runsc PATH] [--json FILE]

Standard library only; run as root (runsc rootful, as kiln's gVisor backend runs it, with its
flags: --network=none --ignore-cgroups --platform=ptrace --overlay2=none). runsc only, not
kiln: the question is whether this runsc, on this platform, restores a preloaded interpreter
faster than it starts one; kiln would pay its own costs on top of either.

One OCI bundle: the host's / read-only as the root, a tmpfs /tmp, a bind of a scratch
directory at /w. The program imports numpy, pandas and matplotlib (the native pool's preloads),
says it is ready, waits for /w/go, then reads its stdin (kiln's runtime channel is fd 0 under
runsc), draws from `random` and writes what it saw to /w/out. Interleaved round-robin:

  bare        /usr/bin/python3 running the program, /w/go already there (host paths)
  cold        runsc run: start, imports, answer, exit
  restore     runsc restore of a checkpoint taken once the imports were done: answer, exit

Also reported: the checkpoint's own time and image size, what the restored program read on
stdin (the restore command's, or the checkpointed pipe's?), and whether two restores of one
image draw the same `random` numbers (state a checkpoint freezes is shared by every restore,
like a zygote's by its forks). Prints medians and ratios with the load average before and
after. It measures; it asserts nothing. Exits non-zero only when runsc cannot run or a program
gives a wrong answer.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3"
FLAGS = ["--network=none", "--ignore-cgroups", "--platform=ptrace", "--overlay2=none"]
PROGRAM = r"""
import os, sys, time, random
import numpy, pandas, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot
W = sys.argv[1]
open(W + "/ready", "w").close()
while not os.path.exists(W + "/go"):
    time.sleep(0.001)
seen = os.read(0, 200).decode(errors="replace")
mean = pandas.DataFrame({"a": [1, 2, 3]}).describe().loc["mean", "a"]
with open(W + "/out", "w") as f:
    f.write("%s|%r|%s" % (mean, random.random(), seen))
"""


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def bundle(tmp, w):
    b = os.path.join(tmp, "bundle")
    os.makedirs(b)
    env = ["PATH=/usr/bin:/bin", "MPLCONFIGDIR=/w/mpl", "HOME=/tmp"]
    config = {
        "ociVersion": "1.0.0",
        "process": {
            "user": {"uid": 1000, "gid": 1000},
            "args": [PYTHON, "-I", "-c", PROGRAM, "/w"],
            "env": env,
            "cwd": "/",
            "capabilities": {k: [] for k in ("bounding", "effective", "inheritable", "permitted")},
            "noNewPrivileges": True,
        },
        "root": {"path": "/", "readonly": True},
        "hostname": "bench",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]},
            {"destination": "/w", "type": "bind", "source": w, "options": ["rbind", "rw"]},
        ],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
    }
    with open(os.path.join(b, "config.json"), "w") as f:
        json.dump(config, f)
    return b


class Runsc:
    def __init__(self, runsc, tmp, w):
        self.base = [runsc, "--root", os.path.join(tmp, "state")] + FLAGS
        os.makedirs(os.path.join(tmp, "state"))
        self.bundle = bundle(tmp, w)
        self.w = w
        self.n = 0

    def name(self, kind):
        self.n += 1
        return "%s-%d-%d" % (kind, os.getpid(), self.n)

    def delete(self, cid):
        subprocess.run(self.base + ["delete", "--force", cid], capture_output=True)

    def reset(self, go):
        for f in ("ready", "go", "out"):
            try:
                os.unlink(os.path.join(self.w, f))
            except FileNotFoundError:
                pass
        if go:
            open(os.path.join(self.w, "go"), "w").close()

    def out(self):
        with open(os.path.join(self.w, "out")) as f:
            return f.read()

    def timed(self, argv, stdin):
        t = time.perf_counter()
        r = subprocess.run(argv, input=stdin, capture_output=True, timeout=120)
        dt = (time.perf_counter() - t) * 1000
        if r.returncode != 0:
            sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(argv[:8]), r.stderr.decode()[-2000:]))
        return dt

    def cold(self, stdin):
        self.reset(go=True)
        cid = self.name("cold")
        dt = self.timed(self.base + ["run", "--bundle", self.bundle, cid], stdin)
        self.delete(cid)
        return dt, self.out()

    def checkpoint(self, image):
        self.reset(go=False)
        cid = self.name("ckpt")
        p = subprocess.Popen(self.base + ["run", "--bundle", self.bundle, cid],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        p.stdin.write(b"checkpointed-pipe\n")
        p.stdin.flush()
        deadline = time.time() + 120
        while not os.path.exists(os.path.join(self.w, "ready")):
            if p.poll() is not None or time.time() > deadline:
                sys.exit("the program to checkpoint did not get ready: %s" % p.stderr.read().decode()[-2000:])
            time.sleep(0.01)
        time.sleep(0.2)  # the program is in its wait loop
        t = time.perf_counter()
        r = subprocess.run(self.base + ["checkpoint", "--image-path", image, cid], capture_output=True)
        dt = (time.perf_counter() - t) * 1000
        p.wait(timeout=60)
        self.delete(cid)
        if r.returncode != 0:
            return None, r.stderr.decode()[-2000:]
        return dt, None

    def restore(self, image, stdin):
        self.reset(go=True)
        cid = self.name("restore")
        dt = self.timed(self.base + ["restore", "--image-path", image, "--bundle", self.bundle, cid], stdin)
        self.delete(cid)
        return dt, self.out()


def bare(w, stdin):
    for f in ("out",):
        try:
            os.unlink(os.path.join(w, f))
        except FileNotFoundError:
            pass
    open(os.path.join(w, "go"), "w").close()
    env = {"PATH": "/usr/bin:/bin", "MPLCONFIGDIR": os.path.join(w, "mpl"), "HOME": w}
    t = time.perf_counter()
    subprocess.run([PYTHON, "-I", "-c", PROGRAM, w], input=stdin, env=env, check=True, timeout=120)
    dt = (time.perf_counter() - t) * 1000
    with open(os.path.join(w, "out")) as f:
        return dt, f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--runsc", default=shutil.which("runsc", path="/usr/sbin:/usr/bin") or "runsc")
    ap.add_argument("--json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (runsc rootful, as kiln's gVisor backend)")
    version = subprocess.run([a.runsc, "--version"], capture_output=True, text=True)
    if version.returncode != 0:
        sys.exit("runsc cannot run: %s" % version.stderr)
    print("runsc:", version.stdout.splitlines()[0], "| load before:", load(), "|", datetime.datetime.now().isoformat(timespec="seconds"))

    tmp = tempfile.mkdtemp(prefix="kiln-ckpt-")
    try:
        w = os.path.join(tmp, "w")
        os.makedirs(os.path.join(w, "mpl"))
        os.chmod(tmp, 0o755)
        os.chown(w, 1000, 1000)
        os.chown(os.path.join(w, "mpl"), 1000, 1000)
        r = Runsc(a.runsc, tmp, w)
        r.cold(b"warm-up\n")  # matplotlib's font cache in /w/mpl, once
        bare(w, b"warm-up\n")
        image = os.path.join(tmp, "image")
        os.makedirs(image)
        ckpt_ms, why = r.checkpoint(image)
        if ckpt_ms is None:
            print("runsc checkpoint failed here:", why)
            return 0
        size = sum(os.path.getsize(os.path.join(image, f)) for f in os.listdir(image))
        times = {"bare": [], "cold": [], "restore": []}
        outs = {"bare": [], "cold": [], "restore": []}
        kinds = list(times)
        for i in range(a.runs):
            for k in kinds[i % 3:] + kinds[:i % 3]:
                stdin = ("%s-%d\n" % (k, i)).encode()
                dt, out = bare(w, stdin) if k == "bare" else r.cold(stdin) if k == "cold" else r.restore(image, stdin)
                if not out.startswith("2.0|"):
                    sys.exit("%s gave a wrong answer: %r" % (k, out))
                times[k].append(dt)
                outs[k].append(out)
        med = {k: statistics.median(v) for k, v in times.items()}
        print("checkpoint: %.0f ms, image %.1f MiB" % (ckpt_ms, size / 2**20))
        for k in kinds:
            print("%-8s median %7.1f ms  (%s)  %.2fx bare, %.2fx cold" % (
                k, med[k], " ".join("%.0f" % x for x in times[k]), med[k] / med["bare"], med[k] / med["cold"]))
        seen = outs["restore"][0].split("|", 2)[2]
        draws = [o.split("|")[1] for o in outs["restore"]]
        print("a restore read on stdin: %r (restore command's own: %r)" % (seen, "restore-0\n"))
        print("restores drawing the same random.random(): %d of %d distinct values" % (len(set(draws)), len(draws)))
        print("load after:", load())
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"runsc": version.stdout.splitlines()[0], "checkpoint_ms": ckpt_ms, "image_bytes": size,
                           "times_ms": times, "restore_stdin": seen, "restore_draws": draws}, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
