#!/usr/bin/python3
"""What the output audit costs (docs/adr/0015): latency with the filter on against off,
side by side in one run of one server.

    /usr/bin/python3 bench/audit_bench.py --kiln ./build/kiln [--rounds 40]

It starts its own `kiln serve` on 127.0.0.1 (ephemeral port, data in a temporary directory)
with two profiles that differ only in [profiles.NAME.output_audit]: `audit_on` (the default
detectors, the server's own API keys and PEM private keys, redacted) and `audit_off`
(enabled = false). Both have the same limits and their own warm pool. Workloads, each one
request at a time over one keep-alive connection:

  print1        POST /v1/execute {"code": "print(1)"}
  out1m         a 1 MiB stdout (16,384 lines of 64 bytes that hold "kiln_" and "-----",
                so the filter's streaming hold-back is exercised, but no secret)
  out1m_sse     the same with Accept: text/event-stream (the chunk-by-chunk filter)

Each round runs every workload once with the filter on and once off, in a random order, so
both see the same machine. It reports, per workload, the median and mean latency of each side
and their ratios (on / off), and the CPU time of the `kiln serve` process itself per request
(/proc/PID/stat, read before and after each request: the filter runs there, while the sandbox
and its supervisor are other processes), whose difference on - off is the filter's own cost
whatever the neighbours' load does to the latency. The targets (issue 14) are <= 1.02 for print1 and <= 1.05 for
the 1 MiB output. It measures; it asserts nothing (a busy machine moves the numbers). It
exits non-zero only when something is broken (no server, a wrong answer).
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

LIMITS = """
[profiles.%(name)s.defaults]
timeout = 30
memory = "512m"
cpus = 1
pids = 256
output_limit = "4m"
disk = "128m"
"""

CONFIG = """
[server]
concurrency = 2
queue = 16

[tenants.default]
rate = 100000
burst = 100000
max_concurrent = 16

[pool]
enabled = true
min = 1
max = 2

[profiles.audit_on]
interpreter = "/usr/bin/python3"
%(on_limits)s
[profiles.audit_off]
interpreter = "/usr/bin/python3"
[profiles.audit_off.output_audit]
enabled = false
%(off_limits)s
"""

OUT1M = ("import sys\n"
         "line = 'row %06d: the quick brown fox, kiln_ and ----- but no key at all\\n'\n"
         "s = ''.join(line % i for i in range(16384))\n"
         "sys.stdout.write(s[:1 << 20])\n")

WORKLOADS = [("print1", "print(1)", False), ("out1m", OUT1M, False),
             ("out1m_sse", OUT1M, True)]


class Server:
    def __init__(self, kiln, config, tmp):
        self.log = open(os.path.join(tmp, "serve.log"), "w")
        argv = [kiln, "serve", "--config", config, "--listen", "127.0.0.1:0",
                "--data-dir", os.path.join(tmp, "data")]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.port = self.key = None
        up = threading.Event()

        def err():
            for line in self.proc.stderr:
                self.log.write(line)
                self.log.flush()
                m = re.search(r"listening on http://[0-9.]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    up.set()
            up.set()

        def out():
            self.key = self.proc.stdout.readline().strip() or None
            self.proc.stdout.read()

        threading.Thread(target=err, daemon=True).start()
        t = threading.Thread(target=out, daemon=True)
        t.start()
        up.wait(120)
        t.join(5)
        if not self.port or not self.key:
            self.stop()
            sys.exit("audit_bench: kiln serve did not start (see %s)" % self.log.name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ms(pid):
    """User + system CPU time of process `pid` (all its threads, dead ones too), in ms."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / CLK_TCK


def request(conn, key, profile, code, sse):
    """One execution; (seconds, the result)."""
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
    if sse:
        headers["Accept"] = "text/event-stream"
    body = json.dumps({"code": code, "profile": profile})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/execute", body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    dt = time.perf_counter() - t0
    if resp.status != 200:
        sys.exit("audit_bench: HTTP %d: %s" % (resp.status, data[:500]))
    if sse:
        done = data.rsplit(b"event: done\ndata: ", 1)
        if len(done) != 2:
            sys.exit("audit_bench: no done event in the stream")
        result = json.loads(done[1].split(b"\n\n", 1)[0])
    else:
        result = json.loads(data)
    return dt, result


def check(name, result):
    if result.get("status") != "ok":
        sys.exit("audit_bench: %s: status %r (%s)" % (name, result.get("status"),
                                                      result.get("reason")))
    want = 2 if name == "print1" else 1 << 20
    if len(result.get("stdout", "")) != want:
        sys.exit("audit_bench: %s: %d bytes of stdout, not %d" %
                 (name, len(result.get("stdout", "")), want))
    if "output_audit" in result:
        sys.exit("audit_bench: %s: the filter found something: %s" % (name,
                                                                      result["output_audit"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="./build/kiln")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workloads", default="print1,out1m,out1m_sse",
                    help="comma-separated subset of print1, out1m, out1m_sse")
    args = ap.parse_args()
    chosen = args.workloads.split(",")
    workloads = [w for w in WORKLOADS if w[0] in chosen]
    if not workloads:
        sys.exit("audit_bench: --workloads names none of print1, out1m, out1m_sse")
    kiln = os.path.abspath(args.kiln)
    tmp = tempfile.mkdtemp(prefix="kiln-audit-bench-")
    config = os.path.join(tmp, "kiln.toml")
    with open(config, "w") as f:
        f.write(CONFIG % {"on_limits": LIMITS % {"name": "audit_on"},
                          "off_limits": LIMITS % {"name": "audit_off"}})
    server = Server(kiln, config, tmp)
    times = {(w, side): [] for w, _, _ in workloads for side in ("on", "off")}
    cpu = {(w, side): 0.0 for w, _, _ in workloads for side in ("on", "off")}
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        for r in range(args.warmup + args.rounds):
            runs = [(w, code, sse, side) for w, code, sse in workloads for side in ("on", "off")]
            random.shuffle(runs)
            for name, code, sse, side in runs:
                if sse:  # the server closes an event stream: a fresh connection
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
                c0 = cpu_ms(server.proc.pid)
                dt, result = request(conn, server.key, "audit_" + side, code, sse)
                c1 = cpu_ms(server.proc.pid)
                check(name, result)
                if sse:
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
                if r >= args.warmup:
                    times[(name, side)].append(dt)
                    cpu[(name, side)] += c1 - c0
        conn.close()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print("audit_bench: %s, %s, %d cpus, %d rounds (+%d warm-up), one request at a time" %
          (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           platform.node(), os.cpu_count(), args.rounds, args.warmup))
    print("%-10s %12s %12s %8s   %12s %12s %8s   target   %s" %
          ("workload", "median on", "median off", "ratio", "mean on", "mean off", "ratio",
           "server cpu/request on, off: filter share of the mean"))
    targets = {"print1": 1.02, "out1m": 1.05, "out1m_sse": 1.05}
    for name, _, _ in workloads:
        on, off = times[(name, "on")], times[(name, "off")]
        mon, moff = statistics.median(on), statistics.median(off)
        aon, aoff = statistics.fmean(on), statistics.fmean(off)
        con = cpu[(name, "on")] / len(on)
        coff = cpu[(name, "off")] / len(off)
        print("%-10s %10.2fms %10.2fms %8.3f   %10.2fms %10.2fms %8.3f   <= %.2f   "
              "%.2f ms, %.2f ms: %+.1f%%" %
              (name, mon * 1e3, moff * 1e3, mon / moff, aon * 1e3, aoff * 1e3, aon / aoff,
               targets[name], con, coff, (con - coff) / (aoff * 1e3) * 100))


if __name__ == "__main__":
    main()
