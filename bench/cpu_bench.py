#!/usr/bin/python3
"""CPU time per execution, pooled and cold, against a bare interpreter start.

    /usr/bin/python3 bench/cpu_bench.py --kiln ./build/kiln [--runs 150] [--gap-ms 40]
                                        [--pool KEY=VALUE ...] [--json FILE]

On a machine whose cpus are all busy, what bounds sandboxes per second is the CPU one sandbox
costs, wherever it is spent: the server, the spawner, the supervisor, the sandbox's processes,
and for a pooled one its refill (the zygote's fork, the child's setup, the teardown of its copy
of the zygote). Wall-clock figures on a shared, noisy machine move with the neighbours; CPU time
spent by kiln's own processes moves much less. So this script runs `kiln serve` inside a cgroup
of its own (cgroup v1 cpuacct or v2 cpu.stat; the sandboxes' cgroups are made below it and
counted too), sends `--runs` one-shot `print(1)` requests one at a time (`--gap-ms` apart, so
that the pool refills between them, as in (a) of pool_bench.py), waits until the refills are
done, and divides the cgroup's CPU time by the number of executions, after subtracting what the
idle server spends over the same time. Then the same with `[pool] enabled = false` (the cold
path), and bare `/usr/bin/python3 -c 'print(1)'` starts (their CPU time from getrusage of the
waited-for children). Every answer is checked; it asserts no timing. Run as root.

`--pool refill_nice=0` (repeatable) sets a `[pool]` key of the pooled server's configuration.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_bench  # noqa: E402  (Server, bench_config)

BARE_PYTHON = "/usr/bin/python3"
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


class CpuCgroup:
    """A cgroup of our own that counts CPU time: v1 cpuacct, else v2 cpu.stat."""

    def __init__(self):
        self.v1 = None
        for line in open("/proc/self/cgroup"):
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if "cpuacct" in ctrls.split(","):
                self.v1 = True
                self.own = path
                mount = self._mount_of("cpuacct")
                break
            if ctrls == "" and self.v1 is None:
                self.v1 = False
                self.own = path
                mount = self._mount_of(None)
        if self.v1 is None or mount is None:
            raise RuntimeError("no cgroup hierarchy with cpu accounting")
        self.root = mount
        self.dir = os.path.join(mount, self.own.lstrip("/"), "kiln-cpu-bench-%d" % os.getpid())
        os.mkdir(self.dir)

    @staticmethod
    def _mount_of(controller):
        for line in open("/proc/self/mountinfo"):
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if controller is None and rfields[0] == "cgroup2":
                return fields[4]
            if controller and rfields[0] == "cgroup" and controller in rfields[2].split(","):
                return fields[4]
        return None

    def usage_ms(self):
        if self.v1:
            return int(open(os.path.join(self.dir, "cpuacct.usage")).read()) / 1e6
        for line in open(os.path.join(self.dir, "cpu.stat")):
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e3
        raise RuntimeError("cpu.stat without usage_usec")

    def enter(self):
        with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def leave(self):
        with open(os.path.join(self.root, self.own.lstrip("/"), "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def measure_server(args, cg, pool_settings, label):
    tmp = tempfile.mkdtemp(prefix="kiln-cpu-bench-")
    conf = os.path.join(tmp, "kiln.toml")
    want = {"server": {"concurrency": "0", "queue": "256"},
            "tenants.default": {"rate": "100000", "burst": "100000", "max_concurrent": "256"},
            "pool": dict(pool_settings)}
    http_bench.bench_config(os.path.join(REPO, "kiln.toml"), conf, want)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    cg.enter()
    try:
        server = http_bench.Server(args.kiln, conf, tmp, env)
    finally:
        cg.leave()
    try:
        pooled_seen = 0
        # Warm up: the zygote starts, the pool fills; checked answers.
        deadline = time.monotonic() + 60
        for i in range(200):
            status, body = server.post()
            if status != 200 or body.get("status") != "ok" or body.get("stdout") != "1\n":
                raise RuntimeError("%s: broken answer: %r %r" % (label, status, body))
            if body.get("phases_ms", {}).get("clone", -1) == 0:
                pooled_seen += 1
            if i >= 5 and (pooled_seen >= 3 or pool_settings.get("enabled") == "false"):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        time.sleep(1.0)
        # The idle server's own CPU over the time the runs will take.
        t0, u0 = time.monotonic(), cg.usage_ms()
        time.sleep(args.runs * args.gap_ms / 1e3 / 2 + 1.0)
        idle_per_s = (cg.usage_ms() - u0) / (time.monotonic() - t0)
        pooled = 0
        t0, u0 = time.monotonic(), cg.usage_ms()
        for _ in range(args.runs):
            status, body = server.post()
            if status != 200 or body.get("status") != "ok" or body.get("stdout") != "1\n":
                raise RuntimeError("%s: broken answer: %r %r" % (label, status, body))
            if body.get("phases_ms", {}).get("clone", -1) == 0:
                pooled += 1
            time.sleep(args.gap_ms / 1e3)
        time.sleep(1.5)  # the last refills and teardowns
        used = cg.usage_ms() - u0
        span = time.monotonic() - t0
        per = (used - idle_per_s * span) / args.runs
        return {"label": label, "cpu_ms_per_execution": per, "pooled": pooled, "runs": args.runs,
                "idle_cpu_ms_per_s": idle_per_s, "cpu_ms": used, "seconds": span}
    finally:
        server.stop()


def measure_bare(args):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    for _ in range(args.runs):
        p = subprocess.run([BARE_PYTHON, "-c", "print(1)"], capture_output=True, text=True, env=env)
        if p.returncode != 0 or p.stdout != "1\n":
            raise RuntimeError("bare python broken")
        time.sleep(args.gap_ms / 1e3)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    ms = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1e3
    return {"label": "bare python", "cpu_ms_per_execution": ms / args.runs, "runs": args.runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "kiln"))
    ap.add_argument("--runs", type=int, default=150)
    ap.add_argument("--gap-ms", type=float, default=40)
    ap.add_argument("--pool", action="append", default=[], metavar="KEY=VALUE",
                    help="a [pool] setting of the pooled server (repeatable)")
    ap.add_argument("--json", help="also write every number to this file")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("BROKEN: run as root (the pool and the cgroup need it)")
        return 1
    settings = {"enabled": "true"}
    for kv in args.pool:
        k, _, v = kv.partition("=")
        settings[k.strip()] = v.strip()
    cg = CpuCgroup()
    load0 = os.getloadavg()[0]
    try:
        rows = [measure_bare(args),
                measure_server(args, cg, settings, "kiln, pooled"),
                measure_server(args, cg, {"enabled": "false"}, "kiln, cold (pool off)")]
    except RuntimeError as e:
        print("BROKEN: %s" % e)
        return 1
    finally:
        cg.remove()
    load1 = os.getloadavg()[0]
    bare = rows[0]["cpu_ms_per_execution"]
    print("host: kernel %s, %d CPUs, load %.2f -> %.2f, %s, cgroup %s" % (
        platform.release(), os.cpu_count(), load0, load1,
        datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "v1" if cg.v1 else "v2"))
    print("pool settings: %s" % ", ".join("%s=%s" % kv for kv in settings.items()))
    print("%-26s %14s %10s %s" % ("", "cpu ms / exec", "vs bare", "notes"))
    for r in rows:
        note = ""
        if "pooled" in r:
            note = "%d of %d pooled; idle server %.2f cpu ms/s" % (r["pooled"], r["runs"],
                                                                   r["idle_cpu_ms_per_s"])
        print("%-26s %14.2f %9.2fx %s" % (r["label"], r["cpu_ms_per_execution"],
                                            r["cpu_ms_per_execution"] / bare, note))
    print("pooled vs cold: %.2fx the cpu" % (rows[1]["cpu_ms_per_execution"] /
                                            rows[2]["cpu_ms_per_execution"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load": [load0, load1], "settings": settings, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
