#!/usr/bin/python3
"""The gVisor backend (docs/adr/0021) side by side with the native jail and bare Python, in one run.

    /usr/bin/python3 bench/gvisor_bench.py --kiln ./build/kiln [--runs 20] [--json FILE]

Standard library only; run as root (the gVisor backend and the warm pool need root and cgroups).
One `kiln serve` with the repository's kiln.toml plus two gVisor profiles (backend = "gvisor"):
`gvisor` with `pool = false` (every run cold) and `gvisor_pooled` (its warm pool: runsc sandboxes
started ahead, the preloads imported; src/zygote/gvisor_pool.h).
Interleaved round-robin (the starting candidate rotates each round), for `print(1)` and the
pandas snippet (a 1,000-row DataFrame, describe()):

  bare        /usr/bin/python3 -c CODE
  native      POST /v1/execute, profile default, a sandbox from the warm pool (checked: pooled)
  gvisor_cold POST /v1/execute, profile gvisor: a cold runsc sandbox
  gvisor_pooled  POST /v1/execute, profile gvisor_pooled, a sandbox from its pool (checked:
              pooled; each sample waits 2 s first, for the one refill in flight to finish)

and the cost per cell, in a session of each backend, of a CPU-bound cell and a syscall-heavy one
(the result's duration_ms: the cell's own run time, no start-up). Prints medians, p90s and the
ratios, with the load average before and after. It measures; it asserts nothing. It exits non-zero
only when something is broken (a wrong answer, a server that does not start).
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_bench  # noqa: E402  (Server, bench_config)

BARE_PYTHON = "/usr/bin/python3"
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PRINT = ("print(1)", "1\n")
PANDAS = ("import pandas as pd\n"
          "df = pd.DataFrame({'a': range(1000), 'b': [i * 0.5 for i in range(1000)]})\n"
          "d = df.describe()\n"
          "print(int(d.loc['count', 'a']))\n", "1000\n")
CPU_CELL = ("s = 0\nfor i in range(2_000_000):\n    s += i * i\nprint(s > 0)\n", "True\n")
SYSCALL_CELL = ("import os\nfor _ in range(20_000):\n    os.stat('/usr')\nprint('done')\n",
                "done\n")
GVISOR_PROFILE = """
[profiles.gvisor]
interpreter = "/usr/bin/python3"
backend = "gvisor"
pool = false

[profiles.gvisor_pooled]
interpreter = "/usr/bin/python3"
backend = "gvisor"
"""


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(q * len(v) + 0.999999) - 1))] if v else float("nan")


def median(values):
    return pct(values, 0.5)


def bare_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


class Client:
    def __init__(self, server):
        u = urllib.parse.urlparse(server.url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        self.key = server.key

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                          headers={"Authorization": "Bearer " + self.key,
                                   "Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None)


def check(status, j, want, what):
    if status not in (200, 201) or j.get("status", "ok") != "ok" or \
            (want is not None and j.get("stdout") != want):
        raise RuntimeError("%s broken: HTTP %s %s" % (what, status, json.dumps(j)[:800]))


def bare(code, want):
    t0 = time.perf_counter()
    p = subprocess.run([BARE_PYTHON, "-c", code], capture_output=True, text=True, env=bare_env())
    ms = (time.perf_counter() - t0) * 1e3
    if p.returncode != 0 or p.stdout != want:
        raise RuntimeError("bare python broken: %r %r" % (p.stdout, p.stderr[-500:]))
    return ms


def via_http(client, profile, code, want, must_pool):
    t0 = time.perf_counter()
    status, j = client.call("POST", "/v1/execute", {"code": code, "profile": profile})
    ms = (time.perf_counter() - t0) * 1e3
    check(status, j, want, profile)
    ph = j.get("phases_ms", {})
    pooled = ph.get("clone", -1) == 0 and ph.get("maps", -1) == 0
    if must_pool and not pooled:
        return None  # the pool had none ready: not this candidate's sample
    return ms


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "kiln"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--pandas-runs", type=int, default=8)
    ap.add_argument("--cell-runs", type=int, default=8)
    ap.add_argument("--json", help="also write the raw numbers here")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    r = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "host": {"kernel": platform.release(), "cpus": os.cpu_count()}, "load_before": load()}
    with tempfile.TemporaryDirectory(prefix="kiln-gvisor-bench-") as tmp:
        cfg = os.path.join(tmp, "kiln.toml")
        http_bench.bench_config(os.path.join(REPO, "kiln.toml"), cfg, {
            "server": {"concurrency": "4", "queue": "64"},
            "tenants.default": {"rate": "100000", "burst": "100000", "max_concurrent": "64"},
            "pool": {"enabled": "true", "max": "4"},
        })
        with open(cfg, "a", encoding="utf-8") as f:
            f.write(GVISOR_PROFILE)
        server = http_bench.Server(kiln, cfg, tmp, bare_env())
        try:
            client = Client(server)
            # Warm-up: the pool fills, runsc and the page cache are warm.
            deadline = time.time() + 90
            while via_http(client, "default", *PRINT, True) is None and time.time() < deadline:
                time.sleep(0.3)
            while (via_http(client, "gvisor_pooled", *PRINT, True) is None and
                   time.time() < deadline + 60):
                time.sleep(1)
            for _ in range(2):
                via_http(client, "gvisor", *PRINT, False)
                bare(*PRINT)
            for name, (code, want), runs in (("print", PRINT, args.runs),
                                              ("pandas", PANDAS, args.pandas_runs)):
                cands = [("bare", lambda: bare(code, want)),
                         ("native_pooled", lambda: via_http(client, "default", code, want, True)),
                         ("gvisor_cold", lambda: via_http(client, "gvisor", code, want, False)),
                         ("gvisor_pooled",
                          lambda: time.sleep(2) or via_http(client, "gvisor_pooled", code, want,
                                                            True))]
                got = {c: [] for c, _ in cands}
                missed = {c: 0 for c, _ in cands}
                for i in range(runs):
                    order = cands[i % len(cands):] + cands[:i % len(cands)]
                    for c, fn in order:
                        time.sleep(0.1)  # let a pool refill finish: the start, not the refill
                        v = fn()
                        if v is None:
                            missed[c] += 1
                        else:
                            got[c].append(v)
                r[name] = {c: {"median_ms": median(v), "p90_ms": pct(v, 0.9), "n": len(v)}
                           for c, v in got.items()}
                r[name]["not_pooled"] = missed
            # Cost per cell: one session per backend, the cells interleaved.
            sessions = {}
            for backend, profile in (("native", "default"), ("gvisor", "gvisor")):
                status, j = client.call("POST", "/v1/sessions", {"profile": profile})
                check(status, j, None, "session " + profile)
                sessions[backend] = j["id"]
            cells = {}
            for cname, (code, want) in (("cpu", CPU_CELL), ("syscalls", SYSCALL_CELL)):
                got = {b: [] for b in sessions}
                for i in range(args.cell_runs):
                    for b in (list(sessions) if i % 2 == 0 else list(reversed(list(sessions)))):
                        status, j = client.call("POST", "/v1/sessions/%s/execute" % sessions[b],
                                                {"code": code})
                        check(status, j, want, "%s cell %s" % (b, cname))
                        got[b].append(j["duration_ms"])
                cells[cname] = {b: {"median_ms": median(v), "p90_ms": pct(v, 0.9)}
                                for b, v in got.items()}
            r["cells"] = cells
            for sid in sessions.values():
                client.call("DELETE", "/v1/sessions/" + sid)
        finally:
            server.stop()
    r["load_after"] = load()
    print_report(r)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(r, f, indent=1)
    return 0


def print_report(r):
    print("gVisor bench %s, Linux %s, %d cpus; load average %s (before), %s (after)" % (
        r["time"], r["host"]["kernel"], r["host"]["cpus"], r["load_before"], r["load_after"]))
    for name in ("print", "pandas"):
        x = r[name]
        b = x["bare"]["median_ms"]
        print("\n%s (median / p90 ms, x bare median; samples not pooled, dropped: native %d, "
              "gvisor %d)" % (name, x["not_pooled"]["native_pooled"],
                              x["not_pooled"]["gvisor_pooled"]))
        for c in ("bare", "native_pooled", "gvisor_cold", "gvisor_pooled"):
            print("  %-14s %8.1f %8.1f   %5.2fx   (n=%d)" % (
                c, x[c]["median_ms"], x[c]["p90_ms"], x[c]["median_ms"] / b, x[c]["n"]))
        print("  gvisor_cold / native_pooled: %.2fx; gvisor_pooled / gvisor_cold: %.2fx; "
              "gvisor_pooled / native_pooled: %.2fx" % (
                  x["gvisor_cold"]["median_ms"] / x["native_pooled"]["median_ms"],
                  x["gvisor_pooled"]["median_ms"] / x["gvisor_cold"]["median_ms"],
                  x["gvisor_pooled"]["median_ms"] / x["native_pooled"]["median_ms"]))
    print("\ncost per cell in a session (duration_ms, median / p90)")
    for cname, x in r["cells"].items():
        print("  %-9s native %8.1f %8.1f   gvisor %8.1f %8.1f   gvisor/native %.2fx" % (
            cname, x["native"]["median_ms"], x["native"]["p90_ms"], x["gvisor"]["median_ms"],
            x["gvisor"]["p90_ms"], x["gvisor"]["median_ms"] / x["native"]["median_ms"]))


if __name__ == "__main__":
    sys.exit(main())
