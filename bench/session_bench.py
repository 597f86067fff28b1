#!/usr/bin/python3
"""Sessions from the warm pool against cold sessions and bare Python, side by side in one run.

    /usr/bin/python3 bench/session_bench.py --kiln ./build/kiln [--runs 20] [--json FILE]

Standard library only; run as root (the pool needs root and cgroups). Two `kiln serve`s run at
once, one with the warm pool and one with `[pool] enabled = false` (the cold path), each with the
repository's kiln.toml otherwise. Each run, in turn on the pooled server, the cold server and bare
Python:

  - a session: POST /v1/sessions, then the pandas cell (a 1,000-row DataFrame, describe()), then
    a third cell `x + 1`: the time to the session's first answer (create + first pandas cell),
    and the later cell alone;
  - bare: `/usr/bin/python3 -c <the pandas cell>` (a fresh interpreter that imports pandas).

A pooled-server session that found no pooled sandbox ready (`"pooled": false`) is counted as a
cold fallback and left out of the pooled figures. Ratios are of p50s from this run; the load
average before and after is printed. It measures; it asserts nothing. It exits non-zero only
when something is broken (a wrong answer, a server that does not start).
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_bench  # noqa: E402  (Server, bench_config)
import pool_bench  # noqa: E402  (PANDAS, bare_run, bare_env, pct)

REPO = pool_bench.REPO


class Sessions:
    """One keep-alive connection to a server's session routes."""

    def __init__(self, server):
        u = urllib.parse.urlparse(server.url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        self.key = server.key

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=None if body is None else json.dumps(body),
                          headers={"Authorization": "Bearer " + self.key,
                                   "Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None)

    def run(self):
        """create + pandas cell (ms), a later cell (ms), pooled?"""
        t0 = time.perf_counter()
        status, s = self.call("POST", "/v1/sessions", {})
        if status != 201:
            raise RuntimeError("kiln broken: POST /v1/sessions: %s %s" % (status, s))
        sid = s["id"]
        status, r = self.call("POST", "/v1/sessions/%s/execute" % sid,
                              {"code": pool_bench.PANDAS + "x = 41\n"})
        first = (time.perf_counter() - t0) * 1e3
        if status != 200 or r.get("status") != "ok" or r.get("stdout") != "1000\n":
            raise RuntimeError("kiln broken: pandas cell: %s %s" % (status, json.dumps(r)[:800]))
        t1 = time.perf_counter()
        status, r = self.call("POST", "/v1/sessions/%s/execute" % sid, {"code": "x + 1"})
        later = (time.perf_counter() - t1) * 1e3
        text = [o["data"]["text/plain"] for o in r.get("outputs", [])
                if o.get("output_type") == "execute_result"]
        if status != 200 or text != ["42"]:
            raise RuntimeError("kiln broken: later cell: %s %s" % (status, json.dumps(r)[:800]))
        self.call("DELETE", "/v1/sessions/%s" % sid)
        return first, later, bool(s.get("pooled"))


def start(kiln, tmp, pool):
    cfg = os.path.join(tmp, "kiln-%s.toml" % ("pool" if pool else "cold"))
    http_bench.bench_config(os.path.join(REPO, "kiln.toml"), cfg, {
        "tenants.default": {"rate": "100000", "burst": "100000", "max_concurrent": "256",
                            "max_sessions": "64"},
        "pool": {"enabled": "true" if pool else "false"},
    })
    d = tempfile.mkdtemp(prefix="serve-", dir=tmp)
    return http_bench.Server(kiln, cfg, d, pool_bench.bare_env())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "kiln"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", help="also write every number to this file")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": {"kernel": platform.release(), "cpus": os.cpu_count(),
                    "load_before": os.getloadavg()},
           "pooled_first_ms": [], "pooled_later_ms": [], "cold_first_ms": [], "cold_later_ms": [],
           "bare_ms": [], "cold_fallbacks": 0}
    with tempfile.TemporaryDirectory(prefix="kiln-session-bench-") as tmp:
        pooled_server = start(kiln, tmp, True)
        cold_server = start(kiln, tmp, False)
        try:
            pooled, cold = Sessions(pooled_server), Sessions(cold_server)
            for _ in range(3):  # warm-up: the zygote is up, caches are warm
                pooled.run()
                cold.run()
                time.sleep(0.2)
            for _ in range(args.runs):
                first, later, was_pooled = pooled.run()
                if was_pooled:
                    out["pooled_first_ms"].append(first)
                    out["pooled_later_ms"].append(later)
                else:
                    out["cold_fallbacks"] += 1
                first, later, _ = cold.run()
                out["cold_first_ms"].append(first)
                out["cold_later_ms"].append(later)
                out["bare_ms"].append(pool_bench.bare_run(pool_bench.PANDAS, "1000\n"))
                time.sleep(0.2)  # a pause between sessions, as between agents' conversations
        finally:
            pooled_server.stop()
            cold_server.stop()
    out["host"]["load_after"] = os.getloadavg()
    report(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def report(o):
    p50 = lambda k: pool_bench.pct(o[k], 0.5)  # noqa: E731
    print()
    print("host: kernel %s, %d CPUs, load %.2f -> %.2f" % (
        o["host"]["kernel"], o["host"]["cpus"], o["host"]["load_before"][0], o["host"]["load_after"][0]))
    print("runs: %d pooled (%d cold fallbacks), %d cold, %d bare" % (
        len(o["pooled_first_ms"]), o["cold_fallbacks"], len(o["cold_first_ms"]), len(o["bare_ms"])))
    line = "%-52s %10s %10s %10s"
    print(line % ("p50, ms", "pooled", "cold", "ratio"))
    print(line % ("session create + first pandas cell", "%.1f" % p50("pooled_first_ms"),
                  "%.1f" % p50("cold_first_ms"), "%.3fx" % (p50("pooled_first_ms") / p50("cold_first_ms"))))
    print(line % ("a later cell (x + 1)", "%.1f" % p50("pooled_later_ms"), "%.1f" % p50("cold_later_ms"),
                  "%.2fx" % (p50("pooled_later_ms") / p50("cold_later_ms"))))
    print(line % ("pooled first answer vs bare python + pandas", "%.1f" % p50("pooled_first_ms"),
                  "%.1f" % p50("bare_ms"), "%.3fx" % (p50("pooled_first_ms") / p50("bare_ms"))))


if __name__ == "__main__":
    sys.exit(main())
