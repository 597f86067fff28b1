#!/usr/bin/python3
"""A fleet's overhead: p50/p99 of a pooled print(1), one client, one request at a time.

Run it as root with the system interpreter, standard library only:

    /usr/bin/python3 bench/fleet_bench.py --kiln ./build/kiln [--requests 300]

Configurations (docs/adr/0020, docs/deploy.md), each measured on the same
machine with the same kiln.toml ([pool] max = 2, rate limits out of the way),
150 ms between requests so that each finds a warm sandbox (the pool's refill
is not what is measured):

  sqlite          one node, SQLite store, direct HTTP (today's single node;
                  with --baseline-kiln also that binary's, e.g. main's build)
  postgres        one node, PostgreSQL store (a throwaway cluster on a unix
                  socket, fsync off), direct HTTP (with --baseline-kiln also
                  that binary's, alternating, on the same store)
  haproxy-sqlite  HAProxy (the shipped config) in front of the SQLite node:
                  HAProxy's cost alone
  haproxy-N       N = 1, 2, 3 nodes sharing that PostgreSQL store behind
                  HAProxy with deploy/haproxy/haproxy.cfg (TLS, keep-alive)

--configs picks some of them (sqlite is always measured: the others' added
p50 is against it).

The N nodes share this machine's cores, so more nodes are no faster: the
point is what PostgreSQL and HAProxy add to one request. It measures; it
asserts nothing.
"""

import argparse
import http.client
import json
import os
import pwd
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PG_BIN = "/usr/lib/postgresql/15/bin"
BODY = json.dumps({"code": "print(1)"})
CONFIG = """
[server]
concurrency = 2
[tenants.default]
rate = 100000
burst = 100000
max_concurrent = 256
[pool]
max = 2
[profiles.default]
interpreter = "/usr/bin/python3"
[profiles.default.defaults]
timeout = 30
memory = "256m"
"""
FLEET = """
[fleet]
node = "{node}"
heartbeat = 1
node_timeout = 5
drain_wait = 0.1
"""


ALL_CONFIGS = ["sqlite", "haproxy-sqlite", "postgres", "haproxy-1", "haproxy-2", "haproxy-3"]
STARTED = []  # every process this run started, stopped at exit whatever happens
CLEANUP = []


def stop_all():
    for proc in reversed(STARTED):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in reversed(STARTED):
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


class Postgres:
    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "pg")
        os.mkdir(self.dir)
        nobody = pwd.getpwnam("nobody")
        os.chown(self.dir, nobody.pw_uid, nobody.pw_gid)

        def demote():
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)

        data = os.path.join(self.dir, "data")
        subprocess.run([PG_BIN + "/initdb", "-D", data, "-U", "kiln", "-A", "trust", "--locale=C",
                        "--no-sync"], check=True, stdout=subprocess.DEVNULL, preexec_fn=demote)
        self.proc = subprocess.Popen([PG_BIN + "/postgres", "-D", data, "-k", self.dir, "-c",
                                      "listen_addresses=", "-c", "fsync=off"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=demote)
        STARTED.append(self.proc)
        for _ in range(200):
            if subprocess.run([PG_BIN + "/pg_isready", "-q", "-h", self.dir, "-U", "kiln"]).returncode == 0:
                break
            time.sleep(0.05)
        self.n = 0

    def database(self):
        self.n += 1
        name = "bench%d" % self.n
        subprocess.run([PG_BIN + "/createdb", "-h", self.dir, "-U", "kiln", name], check=True)
        return "postgresql:///%s?host=%s&user=kiln" % (name, self.dir)

    def stop(self):
        self.proc.send_signal(signal.SIGQUIT)
        self.proc.wait()


class Node:
    def __init__(self, kiln, tmp, name, store=None):
        self.dir = os.path.join(tmp, name)
        os.mkdir(self.dir)
        cfg = os.path.join(self.dir, "kiln.toml")
        with open(cfg, "w") as f:
            f.write(CONFIG + (FLEET.format(node=name) if store else ""))
        argv = [kiln, "serve", "--listen", "127.0.0.1:0", "--data-dir", self.dir + "/data",
                "--config", cfg] + (["--store", store] if store else [])
        self.err = open(os.path.join(self.dir, "stderr"), "w+")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err)
        STARTED.append(self.proc)
        deadline = time.time() + 60
        self.port = None
        while self.port is None:
            self.err.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+) ", self.err.read())
            if m:
                self.port = int(m.group(1))
            elif time.time() > deadline or self.proc.poll() is not None:
                self.err.seek(0)
                sys.exit("kiln serve did not start: " + self.err.read()[-2000:])
            time.sleep(0.05)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def make_pem(tmp):
    pem = os.path.join(tmp, "haproxy.pem")
    if not os.path.exists(pem):
        subprocess.run("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
                       "-keyout %s/k -out %s/c 2>/dev/null && cat %s/c %s/k > %s"
                       % (tmp, tmp, tmp, tmp, pem), shell=True, check=True)
    return pem


def measure_haproxy(haproxy, tmp, ports, key, requests):
    """HAProxy with the shipped config in front of the nodes on `ports`."""
    port = free_port()
    env = dict(os.environ, KILN_HAPROXY_BIND="127.0.0.1:%d" % port,
               KILN_HAPROXY_CERT=make_pem(tmp))
    for i in range(3):
        # Absent nodes point at a closed port: down, never chosen.
        env["KILN_NODE_%d" % i] = "127.0.0.1:%d" % (ports[i] if i < len(ports) else 9)
    hap = subprocess.Popen([haproxy, "-db", "-f",
                            os.path.join(REPO, "deploy/haproxy/haproxy.cfg")],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    STARTED.append(hap)
    time.sleep(2.5)  # the health checks see every node up
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        return measure(lambda: http.client.HTTPSConnection("127.0.0.1", port, context=ctx), key,
                       requests)
    finally:
        hap.send_signal(signal.SIGTERM)
        hap.wait()


def make_key(kiln, tmp, store):
    argv = [kiln, "keys", "create", "--tenant", "bench"]
    argv += ["--store", store] if store else ["--data-dir", os.path.join(tmp, "sqlite", "data")]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


args_gap = 0.15


def measure(conn_factory, key, n):
    conn = conn_factory()
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    times = []
    for i in range(n + 20):
        t0 = time.perf_counter()
        conn.request("POST", "/v1/execute", BODY, headers)
        r = conn.getresponse()
        body = r.read()
        dt = (time.perf_counter() - t0) * 1000
        if r.status != 200 or json.loads(body).get("stdout") != "1\n":
            sys.exit("bad answer: %d %s" % (r.status, body[:300]))
        if i >= 20:  # the first ones warm the pool and the connections
            times.append(dt)
        time.sleep(args_gap)  # the pool refills: every request finds a warm sandbox
    conn.close()
    return {"p50_ms": round(pct(times, 0.5), 3), "p99_ms": round(pct(times, 0.99), 3),
            "requests": n}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--baseline-kiln", help="another kiln binary (e.g. main's) measured on the "
                    "sqlite configuration too: the SQLite path's cost of the store interface")
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS),
                    help="comma-separated, of: " + ", ".join(ALL_CONFIGS))
    ap.add_argument("--haproxy", default=shutil.which("haproxy") or "/usr/sbin/haproxy")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    configs = args.configs.split(",")
    for c in configs:
        if c not in ALL_CONFIGS:
            sys.exit("--configs: unknown configuration %r (known: %s)" % (c, ", ".join(ALL_CONFIGS)))
    if os.geteuid() != 0:
        sys.exit("run as root (kiln's pool and postgres as nobody)")
    results = {"load_start": open("/proc/loadavg").read().split()[:3]}
    # Removed at exit after stop_all(), so nothing runs on deleted files.
    tmpdir = tempfile.TemporaryDirectory(prefix="kiln-fleet-bench-")
    CLEANUP.append(tmpdir)
    tmp = tmpdir.name
    if True:
        os.chmod(tmp, 0o755)
        # SQLite, one node (and the baseline binary's, alternating, twice each).
        runs = [("sqlite", kiln)]
        if args.baseline_kiln:
            runs = runs + [("sqlite-baseline", os.path.abspath(args.baseline_kiln))]
            runs = runs + runs
        for i, (name, binary) in enumerate(runs):
            node = Node(binary, tmp, "sqlite%d" % i)
            key = node.proc.stdout.readline().decode().strip()  # the first start's key
            r = measure(lambda: http.client.HTTPConnection("127.0.0.1", node.port), key,
                        args.requests)
            if name == "sqlite" and i == 0 and "haproxy-sqlite" in configs:
                results["haproxy-sqlite"] = measure_haproxy(args.haproxy, tmp, [node.port], key,
                                                            args.requests)
            node.stop()
            if name not in results or r["p50_ms"] < results[name]["p50_ms"]:
                results[name] = r

        pg_configs = [c for c in configs if c == "postgres" or re.match(r"haproxy-\d$", c)]
        if pg_configs:
            pg = Postgres(tmp)
            try:
                store = pg.database()
                key = make_key(kiln, tmp, store)
                if "postgres" in configs:
                    # With --baseline-kiln, that binary on the same store too,
                    # alternating with this one (twice each, the better p50
                    # kept), one node up at a time.
                    pg_runs = [("postgres", kiln)]
                    if args.baseline_kiln:
                        pg_runs = (pg_runs + [("postgres-baseline",
                                               os.path.abspath(args.baseline_kiln))]) * 2
                    for i, (name, binary) in enumerate(pg_runs):
                        node = Node(binary, tmp, "pg%d" % i, store)
                        r = measure(lambda: http.client.HTTPConnection("127.0.0.1", node.port),
                                    key, args.requests)
                        node.stop()
                        if name not in results or r["p50_ms"] < results[name]["p50_ms"]:
                            results[name] = r
                nodes = [Node(kiln, tmp, "kiln-0", store)]
                for n in (1, 2, 3):
                    if "haproxy-%d" % n not in configs:
                        continue
                    while len(nodes) < n:
                        nodes.append(Node(kiln, tmp, "kiln-%d" % len(nodes), store))
                    results["haproxy-%d" % n] = measure_haproxy(
                        args.haproxy, tmp, [nd.port for nd in nodes[:n]], key, args.requests)
                for nd in nodes:
                    nd.stop()
            finally:
                pg.stop()
    results["load_end"] = open("/proc/loadavg").read().split()[:3]
    base = results["sqlite"]["p50_ms"]
    for name in ALL_CONFIGS[1:]:
        if name in results:
            results[name]["p50_added_ms"] = round(results[name]["p50_ms"] - base, 3)
    if "postgres-baseline" in results:
        results["postgres"]["p50_ratio_to_baseline"] = round(
            results["postgres"]["p50_ms"] / results["postgres-baseline"]["p50_ms"], 3)
        results["postgres-baseline"]["p50_added_ms_to_baseline_sqlite"] = round(
            results["postgres-baseline"]["p50_ms"] - results["sqlite-baseline"]["p50_ms"], 3)
    if "sqlite-baseline" in results:
        results["sqlite"]["p50_ratio_to_baseline"] = round(
            results["sqlite"]["p50_ms"] / results["sqlite-baseline"]["p50_ms"], 3)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    try:
        main()
    finally:
        stop_all()
        for t in CLEANUP:
            t.cleanup()
