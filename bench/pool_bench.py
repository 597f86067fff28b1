#!/usr/bin/python3
"""The warm pool (docs/adr/0011-zygote.md), measured side by side with bare Python in one run.

    /usr/bin/python3 bench/pool_bench.py --kiln ./build/kiln [--json FILE]

Standard library only; run as root (the pool needs root and cgroups). Prints, each as a ratio
to what it is compared with in the same run:

  (a) POST /v1/execute {"code": "print(1)"} one at a time, p50 and p99, against a bare
      `/usr/bin/python3 -c 'print(1)'` start (interleaved, one of each in turn);
  (b) the pandas snippet (a 1,000-row DataFrame, describe()) over HTTP against bare python
      running the same snippet (interleaved);
  (c) fresh sandboxes per second at concurrency 8 over HTTP (8 keep-alive clients, every
      request a new sandbox), against bare interpreter starts per second at concurrency 8;
  (d) private memory (USS: Private_Clean + Private_Dirty of /proc/PID/smaps_rollup) of an idle
      pooled sandbox (its pid 1 and worker), against a fresh interpreter with the same imports;
  (e) a per-step breakdown: the zygote's start, a refill's steps, and the supervisor's phases.

(d) and (e) and the supervisor-level (a)/(b)/(c) come from `kiln pool-bench` (src/cli/pool.cc),
the HTTP figures from a `kiln serve` this script starts twice: with the pool, and with
`[pool] enabled = false` (the cold path) for reference. It measures; it asserts nothing. It exits
non-zero only when something is broken (a wrong answer, a server that does not start).
"""

import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_bench  # noqa: E402  (Server, bench_config)

BARE_PYTHON = "/usr/bin/python3"
PRINT = "print(1)"
PANDAS = ("import pandas as pd\n"
          "df = pd.DataFrame({'a': range(1000), 'b': [i * 0.5 for i in range(1000)]})\n"
          "d = df.describe()\n"
          "print(int(d.loc['count', 'a']))\n")
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def pct(values, q):
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, max(0, int(q * len(v) + 0.999999) - 1))]


def bare_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def bare_run(code, want):
    t0 = time.perf_counter()
    p = subprocess.run([BARE_PYTHON, "-c", code], capture_output=True, text=True, env=bare_env())
    ms = (time.perf_counter() - t0) * 1e3
    if p.returncode != 0 or p.stdout != want:
        raise RuntimeError("bare python broken: %r %r" % (p.stdout, p.stderr[-500:]))
    return ms


class Client:
    """One keep-alive connection."""

    def __init__(self, server):
        u = urllib.parse.urlparse(server.url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        self.key = server.key

    def execute(self, code):
        body = json.dumps({"code": code})
        self.conn.request("POST", "/v1/execute", body=body,
                          headers={"Authorization": "Bearer " + self.key,
                                   "Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        return r.status, json.loads(data)


def timed(client, code, want):
    t0 = time.perf_counter()
    status, j = client.execute(code)
    ms = (time.perf_counter() - t0) * 1e3
    if status != 200 or j.get("status") != "ok" or j.get("stdout") != want:
        raise RuntimeError("kiln broken: HTTP %s %s" % (status, json.dumps(j)[:800]))
    return ms, j


def start_server(kiln, tmp, pool):
    cfg = os.path.join(tmp, "kiln-%s.toml" % ("pool" if pool else "cold"))
    http_bench.bench_config(os.path.join(REPO, "kiln.toml"), cfg, {
        "server": {"concurrency": "8", "queue": "256"},
        "tenants.default": {"rate": "100000", "burst": "100000", "max_concurrent": "256"},
        "pool": {"enabled": "true" if pool else "false", "max": "16"},
    })
    d = tempfile.mkdtemp(prefix="serve-", dir=tmp)
    return http_bench.Server(kiln, cfg, d, bare_env())


def latency(server, code, want, runs, warmup):
    client = Client(server)
    kiln, bare, phases = [], [], {}
    for i in range(runs + warmup):
        k, j = timed(client, code, want)
        b = bare_run(code, want)
        if i >= warmup:
            kiln.append(k)
            bare.append(b)
            for name, v in (j.get("phases_ms") or {}).items():
                phases.setdefault(name, []).append(v)
        time.sleep(0.005)  # let the pool refill between requests, as between real ones
    return kiln, bare, {k: pct(v, 0.5) for k, v in phases.items()}


def throughput(server, concurrency, seconds):
    stop = time.perf_counter() + seconds
    counts, errors = [0] * concurrency, []

    def worker(i):
        c = Client(server)
        while time.perf_counter() < stop:
            try:
                timed(c, PRINT, "1\n")
                counts[i] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(str(e)[:300])
                return

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError("kiln broken under load: " + errors[0])
    return sum(counts) / elapsed, sum(counts)


def bare_throughput(concurrency, seconds):
    stop = time.perf_counter() + seconds
    n = [0]
    lock = threading.Lock()

    def worker():
        while time.perf_counter() < stop:
            bare_run(PRINT, "1\n")
            with lock:
                n[0] += 1

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        for f in [ex.submit(worker) for _ in range(concurrency)]:
            f.result()
    return n[0] / (time.perf_counter() - t0), n[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "kiln"))
    ap.add_argument("--runs", type=int, default=200, help="print(1) requests (and bare starts)")
    ap.add_argument("--pandas-runs", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=10, help="each throughput run")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json", help="also write every number to this file")
    args = ap.parse_args()
    if os.path.realpath(sys.executable) != os.path.realpath(BARE_PYTHON):
        print("note: run this with %s (it is %s)" % (BARE_PYTHON, sys.executable), file=sys.stderr)
    kiln = os.path.abspath(args.kiln)
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": {"kernel": platform.release(), "cpus": os.cpu_count(),
                    "load_before": os.getloadavg()}}

    print("kiln pool-bench (standalone: supervisor level, memory, refill steps) ...", flush=True)
    pb = subprocess.run([kiln, "pool-bench", "--runs", "100", "--pandas-runs", "10",
                         "--seconds", "5", "--concurrency", str(args.concurrency)],
                        capture_output=True, text=True)
    if pb.returncode != 0:
        print(pb.stderr[-3000:], file=sys.stderr)
        print("BROKEN: kiln pool-bench exited %d" % pb.returncode)
        return 1
    out["standalone"] = json.loads(pb.stdout)

    with tempfile.TemporaryDirectory(prefix="kiln-pool-bench-") as tmp:
        for mode in ("pool", "cold"):
            print("kiln serve, %s ..." % mode, flush=True)
            server = start_server(kiln, tmp, mode == "pool")
            try:
                c = Client(server)
                for _ in range(20):  # warm-up: the pool sizes itself, the zygote is up
                    timed(c, PRINT, "1\n")
                    time.sleep(0.02)
                r = {}
                k, b, ph = latency(server, PRINT, "1\n", args.runs if mode == "pool" else args.runs // 2, 3)
                r["print"] = {"kiln_ms": k, "bare_ms": b, "phases_p50": ph}
                if mode == "pool":
                    k, b, ph = latency(server, PANDAS, "1000\n", args.pandas_runs, 2)
                    r["pandas"] = {"kiln_ms": k, "bare_ms": b, "phases_p50": ph}
                r["throughput"] = throughput(server, args.concurrency, args.seconds)
                out["http_" + mode] = r
            finally:
                server.stop()
        out["bare_throughput"] = bare_throughput(args.concurrency, args.seconds)
    out["host"]["load_after"] = os.getloadavg()
    report(out, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def report(o, args):
    sa = o["standalone"]
    hp, hc = o["http_pool"], o["http_cold"]
    line = "%-58s %12s %12s %9s %s"
    print()
    print("host: kernel %s, %d CPUs, load %.2f -> %.2f" % (
        o["host"]["kernel"], o["host"]["cpus"], o["host"]["load_before"][0], o["host"]["load_after"][0]))
    print(line % ("figure", "kiln", "reference", "ratio", "target"))
    for name, key, target in (("(a) HTTP print(1), pooled", "print", "p50 <= 0.1x"),
                              ("(b) HTTP pandas describe(), pooled", "pandas", "<= 0.03x")):
        k, b = hp[key]["kiln_ms"], hp[key]["bare_ms"]
        for q in (0.5, 0.99):
            print(line % ("%s, p%d (vs bare python)" % (name, q * 100), "%.1f ms" % pct(k, q),
                          "%.1f ms" % pct(b, q), "%.2fx" % (pct(k, q) / pct(b, q)), target))
    k, b = hc["print"]["kiln_ms"], hc["print"]["bare_ms"]
    print(line % ("    HTTP print(1), cold path (pool off), p50", "%.1f ms" % pct(k, 0.5),
                  "%.1f ms" % pct(b, 0.5), "%.2fx" % (pct(k, 0.5) / pct(b, 0.5)), ""))
    bt = o["bare_throughput"][0]
    print(line % ("(c) HTTP sandboxes/s at concurrency %d, pooled" % args.concurrency,
                  "%.1f/s" % hp["throughput"][0], "%.1f/s" % bt,
                  "%.2fx" % (hp["throughput"][0] / bt), ">= 150/s"))
    print(line % ("    HTTP sandboxes/s, cold path (pool off)", "%.1f/s" % hc["throughput"][0],
                  "%.1f/s" % bt, "%.2fx" % (hc["throughput"][0] / bt), ""))
    u = sa["uss_mib"]
    print(line % ("(d) USS per idle pooled sandbox (pid 1 + worker)",
                  "%.2f MiB" % u["pooled_sandbox"]["p50"], "%.1f MiB" % u["fresh_interpreter"]["p50"],
                  "%.3fx" % (u["pooled_sandbox"]["p50"] / u["fresh_interpreter"]["p50"]), "<= 3 MiB"))
    print("    (pid 1 %.2f MiB, worker %.2f MiB; the zygote itself %.1f MiB, shared by all)" % (
        u["pooled_init"]["p50"], u["pooled_worker"]["p50"], u["zygote"]))
    print()
    print("supervisor level (kiln pool-bench, no HTTP, same machine, its own interleaving):")
    for key, label in (("print", "print(1)"), ("pandas", "pandas")):
        s = sa[key]
        print("  %-10s take->result p50 %.1f ms p99 %.1f ms; bare p50 %.1f ms p99 %.1f ms; ratio p50 %.2fx" % (
            label, s["pooled_ms"]["p50"], s["pooled_ms"]["p99"], s["bare_ms"]["p50"],
            s["bare_ms"]["p99"], s["pooled_ms"]["p50"] / s["bare_ms"]["p50"]))
    t = sa["throughput"]
    print("  sandboxes/s at concurrency %d, one supervisor process each: pooled %.1f, cold %.1f, "
          "bare python %.1f (pool sized up to %s by Erlang C)" % (
              t["concurrency"], t["pooled"]["per_second"], t["cold"]["per_second"],
              t["bare_python"]["per_second"], t["pooled"].get("pool_target_max")))
    print()
    print("(e) steps:")
    print("  zygote start (clone to preloaded and ready): %.0f ms" % sa["zygote_start_ms"])
    rf = sa["refill_ms"]
    for k, label in (("fork_to_attach_request", "fork request -> pid 1 asks for its cgroup "
                      "(fork, user ns + maps, namespaces, clone pid 1)"),
                     ("attach", "cgroup attach (v1, overlaps the mounts)"),
                     ("fork_to_attached", "fork request -> attached"),
                     ("fork_to_worker", "fork request -> worker forked, every layer on (checked)"),
                     ("fork_to_ready", "fork request -> hello readable (reseeded)")):
        print("  %-92s p50 %6.2f ms  p90 %6.2f ms" % (label, rf[k]["p50"], rf[k]["p90"]))
    ph = hp["print"]["phases_p50"]
    print("  supervisor phases of a pooled print(1) (p50, ms): " +
          ", ".join("%s %.2f" % (k, v) for k, v in sorted(ph.items()) if v))


if __name__ == "__main__":
    sys.exit(main())
