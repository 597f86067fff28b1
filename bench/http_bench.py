#!/usr/bin/python3
"""Requests/s and p50/p99 latency of POST /v1/execute with print(1), over HTTP.

Run it with the system interpreter, standard library only:

    /usr/bin/python3 bench/http_bench.py --kiln ./build/kiln [--duration 10] [--concurrency 1,4,16]

It starts its own `kiln serve` on 127.0.0.1 with an ephemeral port and a data
directory in a temporary directory, with the repository's kiln.toml except:
[server] concurrency = 0 (one sandbox per core), queue = 256, and
[tenants.default] rate = burst = 100000 and max_concurrent = 256, so that it
measures the sandbox and the server, not the rate limiter. Then, for each
concurrency C, wrk keeps C keep-alive connections busy for --duration seconds
(`wrk --latency`, a Lua script that POSTs {"code": "print(1)"} with the key and
counts non-2xx answers and 200s whose status is not "ok"). The server's own
/metrics (executions by status, rejections) are read before and after as a
cross-check.

Reference line: the same number of bare `/usr/bin/python3 -c 'print(1)'`
process starts that wrk completed, at the same concurrency, from a thread pool.
The ratios compare the two. It measures; it asserts nothing. It exits non-zero
only when something is broken (no server, wrong output), because then there is
no number.
"""

import argparse
import concurrent.futures
import datetime
import http.client
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

BARE_PYTHON = "/usr/bin/python3"  # never a PATH python (a pyenv one is first on PATH here)
CODE = "print(1)"
BODY = json.dumps({"code": CODE})
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

LUA = r"""-- POST /v1/execute {"code": "print(1)"}; usage: wrk ... -s THIS URL -- KEY
wrk.method = "POST"
wrk.body = '%(body)s'
wrk.headers["Content-Type"] = "application/json"

local threads = {}
function setup(thread) table.insert(threads, thread) end

function init(args)
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  non2xx = 0
  not_ok = 0
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
  elseif not string.find(body, '"status":"ok"', 1, true) then
    not_ok = not_ok + 1
  end
end

function done(summary, latency, requests)
  local a, b = 0, 0
  for _, t in ipairs(threads) do
    a = a + t:get("non2xx")
    b = b + t:get("not_ok")
  end
  io.write(string.format("kiln_non2xx %%d\nkiln_not_ok %%d\n", a, b))
end
""" % {"body": BODY}

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def pct(values, q):
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def ms(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text.strip())
    if not m:
        raise ValueError("not a wrk duration: %r" % text)
    return float(m.group(1)) * UNITS[m.group(2)]


# --- the server -------------------------------------------------------------------------------

def bench_config(src, path, want=None):
    """The repository's kiln.toml with the bench's [server] and [tenants.default] values
    (or `want`: {section: {key: toml value}})."""
    if want is None:
        want = {"server": {"concurrency": "0", "queue": "256"},
                "tenants.default": {"rate": "100000", "burst": "100000", "max_concurrent": "256"}}
    out, section, seen = [], None, {k: set() for k in want}

    def flush(sec):
        for key, value in want.get(sec, {}).items():
            if key not in seen[sec]:
                out.append("%s = %s  # http_bench" % (key, value))
                seen[sec].add(key)

    for line in open(src, encoding="utf-8").read().splitlines():
        m = re.match(r"\s*\[([^\]]+)\]\s*(#.*)?$", line)
        if m:
            if section in want:
                flush(section)
            section = m.group(1).strip()
            out.append(line)
            continue
        k = re.match(r"\s*([A-Za-z_]+)\s*=", line)
        if section in want and k and k.group(1) in want[section]:
            out.append("%s = %s  # http_bench (was: %s)" % (k.group(1), want[section][k.group(1)],
                                                            line.split("=", 1)[1].strip()))
            seen[section].add(k.group(1))
            continue
        out.append(line)
    if section in want:
        flush(section)
    for sec in want:
        if not seen[sec]:
            out.append("[%s]" % sec)
            flush(sec)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    return want


class Server:
    def __init__(self, kiln, config, tmp, env):
        self.log = open(os.path.join(tmp, "serve.log"), "w")
        argv = [kiln, "serve", "--config", config, "--listen", "127.0.0.1:0",
                "--data-dir", os.path.join(tmp, "data")]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.url = self.key = None
        up = threading.Event()

        def err():
            for line in self.proc.stderr:
                self.log.write(line)
                self.log.flush()
                m = re.search(r"listening on (http://[0-9.]+:\d+)", line)
                if m:
                    self.url = m.group(1)
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
        if not self.url or not self.key:
            self.stop()
            raise RuntimeError("kiln serve did not start; see its log: " +
                               open(self.log.name).read()[-2000:])

    def get(self, path):
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                self.url + path, timeout=30) as r:
            return r.read().decode()

    def post(self):
        req = urllib.request.Request(self.url + "/v1/execute", data=BODY.encode(), method="POST",
                                     headers={"Authorization": "Bearer " + self.key,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def metrics(self):
        """{'executions': {status: n}, 'rejections': {reason: n}} from /metrics."""
        m = {"executions": {}, "rejections": {}}
        for line in self.get("/metrics").splitlines():
            for name, key, label in (("kiln_executions_total", "executions", "status"),
                                     ("kiln_rejections_total", "rejections", "reason")):
                if line.startswith(name + "{"):
                    lab = re.search(label + r'="([^"]*)"', line)
                    v = float(line.rsplit(" ", 1)[1])
                    k = lab.group(1) if lab else "?"
                    m[key][k] = m[key].get(k, 0) + v
        return m

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def delta(after, before):
    out = {}
    for kind in after:
        d = {k: int(v - before[kind].get(k, 0)) for k, v in after[kind].items()}
        out[kind] = {k: v for k, v in d.items() if v}
    return out


# --- load generators --------------------------------------------------------------------------

def wrk_argv(wrk, c, duration, script, url, key):
    threads = max(1, min(c, os.cpu_count() or 1))
    return [wrk, "-t%d" % threads, "-c%d" % c, "-d%ds" % duration, "--latency", "--timeout", "60s",
            "-s", script, url + "/v1/execute", "--", key]


def run_wrk(argv, duration):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=duration + 120)
    out = p.stdout
    if p.returncode != 0:
        raise RuntimeError("wrk exited %d: %s %s" % (p.returncode, out[-500:], p.stderr[-500:]))
    r = {"raw": out}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    r["rps"] = float(m.group(1)) if m else None
    m = re.search(r"(\d+) requests in ([\d.]+\w+)", out)
    r["requests"] = int(m.group(1)) if m else 0
    r["seconds"] = ms(m.group(2)) / 1e3 if m else None
    for q in ("50", "75", "90", "99"):
        m = re.search(r"^\s+%s%%\s+(\S+)" % q, out, re.M)
        r["p" + q] = ms(m.group(1)) if m else None
    m = re.search(r"Latency\s+(\S+)\s+(\S+)\s+(\S+)", out)
    r["mean"], r["max"] = (ms(m.group(1)), ms(m.group(3))) if m else (None, None)
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    r["socket_errors"] = sum(int(x) for x in m.groups()) if m else 0
    m = re.search(r"kiln_non2xx (\d+)", out)
    r["non2xx"] = int(m.group(1)) if m else None
    m = re.search(r"kiln_not_ok (\d+)", out)
    r["not_ok"] = int(m.group(1)) if m else None
    return r


def run_python_client(url, key, c, duration):
    """A small closed-loop load client (threads, one keep-alive connection each): the
    fallback when wrk is missing."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    lat, counts, lock = [], {"non2xx": 0, "not_ok": 0, "socket_errors": 0}, threading.Lock()
    start = time.perf_counter()
    deadline = start + duration

    def worker():
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/execute", BODY, headers)
                resp = conn.getresponse()
                body = resp.read()
            except (OSError, http.client.HTTPException):
                with lock:
                    counts["socket_errors"] += 1
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                continue
            dt = (time.perf_counter() - t0) * 1e3
            with lock:
                lat.append(dt)
                if not 200 <= resp.status <= 299:
                    counts["non2xx"] += 1
                elif b'"status":"ok"' not in body:
                    counts["not_ok"] += 1
        conn.close()

    ts = [threading.Thread(target=worker) for _ in range(c)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - start
    r = {"requests": len(lat), "seconds": wall, "rps": len(lat) / wall, **counts}
    for q in (50, 75, 90, 99):
        r["p%d" % q] = pct(lat, q / 100) if lat else None
    r["mean"] = sum(lat) / len(lat) if lat else None
    r["max"] = max(lat) if lat else None
    return r


def run_bare_python(n, c, env):
    """n starts of /usr/bin/python3 -c 'print(1)' from a pool of c threads."""
    def one(_):
        t0 = time.perf_counter()
        p = subprocess.run([BARE_PYTHON, "-c", CODE], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env, timeout=60)
        dt = (time.perf_counter() - t0) * 1e3
        if p.returncode != 0 or p.stdout.strip() != b"1":
            raise RuntimeError("bare python: exit %d, stdout %r" % (p.returncode, p.stdout[:100]))
        return dt

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=c) as pool:
        lat = list(pool.map(one, range(n)))
    wall = time.perf_counter() - start
    return {"starts": n, "seconds": wall, "rps": n / wall, "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
            "mean": sum(lat) / n}


# --- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True, help="path to the kiln binary (e.g. ./build/kiln)")
    ap.add_argument("--concurrency", default="1,4,16", help="comma-separated (default 1,4,16)")
    ap.add_argument("--duration", type=int, default=10, help="seconds per concurrency (default 10)")
    ap.add_argument("--config", default=os.path.join(REPO, "kiln.toml"),
                    help="base config whose profiles the server uses (default: the repository's)")
    ap.add_argument("--client", choices=("wrk", "python"), default="wrk",
                    help="load generator (default wrk; python: a small threaded client)")
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--baseline-max", type=int, default=5000,
                    help="at most this many bare python starts per concurrency (default 5000)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the bare python reference")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args()

    if os.path.realpath(sys.executable) != os.path.realpath(BARE_PYTHON):
        print("note: run me with %s, not %s" % (BARE_PYTHON, sys.executable), file=sys.stderr)
    kiln = os.path.abspath(args.kiln)
    if not os.access(kiln, os.X_OK):
        sys.exit("http_bench: %s is not an executable kiln binary" % args.kiln)
    if args.client == "wrk" and not os.access(args.wrk, os.X_OK):
        sys.exit("http_bench: no wrk at %s (apt-get install wrk, or --client python)" % args.wrk)
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    if not levels or min(levels) < 1 or args.duration < 1:
        sys.exit("http_bench: --concurrency needs positive integers and --duration >= 1")

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    reproduce = " ".join(shlex.quote(a) for a in
                         [BARE_PYTHON, os.path.relpath(os.path.abspath(sys.argv[0]))] + sys.argv[1:])
    tmp = tempfile.mkdtemp(prefix="kiln-http-bench-")
    facts = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
             "kernel": platform.release(), "cpu_count": os.cpu_count(),
             "loadavg_start": os.getloadavg()}
    try:
        v = subprocess.run([BARE_PYTHON, "-c", "import sys; print(sys.version.split()[0])"],
                           stdout=subprocess.PIPE, env=env, timeout=30)
        facts["python"] = v.stdout.decode().strip()
        if args.client == "wrk":
            v = subprocess.run([args.wrk, "-v"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            facts["wrk"] = v.stdout.decode().splitlines()[0].split(" Copyright")[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    config = os.path.join(tmp, "kiln.toml")
    overrides = bench_config(args.config, config)
    script = os.path.join(tmp, "post.lua")
    with open(script, "w") as f:
        f.write(LUA)

    server = None
    rows, broken = [], None
    try:
        server = Server(kiln, config, tmp, env)
        try:
            ready = json.loads(server.get("/readyz"))
        except (OSError, ValueError, urllib.error.HTTPError) as e:
            ready = {"error": str(e)}
        for layer in ready.get("layers", []) if isinstance(ready, dict) else []:
            if isinstance(layer, dict) and layer.get("name") == "cgroup":
                facts["cgroup"] = "%s: %s" % (layer.get("state"), layer.get("detail"))
        # Warm-up, and the check that a request does what the bench assumes.
        for _ in range(3):
            status, body = server.post()
            if status != 200 or not isinstance(body, dict) or body.get("status") != "ok" \
                    or body.get("stdout") != "1\n":
                raise RuntimeError("POST /v1/execute: HTTP %s, %r" % (status, str(body)[:300]))
        for c in levels:
            before = server.metrics()
            if args.client == "wrk":
                argv = wrk_argv(args.wrk, c, args.duration, script, server.url, server.key)
                r = run_wrk(argv, args.duration)
                r["command"] = " ".join(shlex.quote(a) for a in argv[:-1] + ["KEY"])
            else:
                r = run_python_client(server.url, server.key, c, args.duration)
                r["command"] = "(python client) %d threads, %d s" % (c, args.duration)
            r["server"] = delta(server.metrics(), before)
            r["concurrency"] = c
            if r["requests"] and not args.no_baseline:
                n = min(r["requests"], args.baseline_max)
                r["python"] = run_bare_python(n, c, env)
                r["ratio_rps"] = r["rps"] / r["python"]["rps"]
                r["ratio_p50"] = r["p50"] / r["python"]["p50"]
            rows.append(r)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
        broken = str(e)
    finally:
        if server:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    facts["loadavg_end"] = os.getloadavg()

    report = {"facts": facts, "settings": {"duration_s": args.duration, "client": args.client,
                                           "code": CODE, "config_overrides": overrides},
              "reproduce": reproduce, "lua": LUA, "rows": rows, "broken": broken}
    if args.json:
        for r in rows:
            r.pop("raw", None)
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 1 if broken else 0


def print_report(r):
    f = r["facts"]
    print("kiln HTTP bench, %s" % f["date"])
    print("host: kernel %s, %s CPUs, /usr/bin/python3 %s, %s, load %s -> %s"
          % (f["kernel"], f["cpu_count"], f.get("python", "?"), f.get("wrk", r["settings"]["client"]),
             " ".join("%.2f" % x for x in f["loadavg_start"]),
             " ".join("%.2f" % x for x in f["loadavg_end"])))
    if "cgroup" in f:
        print("cgroup (GET /readyz): %s" % f["cgroup"])
    ov = r["settings"]["config_overrides"]
    print("server config: the repository's kiln.toml with %s" % "; ".join(
        "[%s] %s" % (s, ", ".join("%s = %s" % kv for kv in kv_.items())) for s, kv_ in ov.items()))
    print("POST /v1/execute %s, %d s per concurrency" % (json.dumps({"code": r["settings"]["code"]}),
                                                         r["settings"]["duration_s"]))
    if r["broken"]:
        print("BROKEN, no (more) numbers: %s" % r["broken"])
    print()
    print("%4s %8s %8s %9s %9s %9s %6s %6s | %9s %8s %8s | %7s %7s"
          % ("conc", "requests", "req/s", "p50", "p99", "max", "non2xx", "not ok",
             "py3 st/s", "py3 p50", "py3 p99", "x rate", "x p50"))
    for row in r["rows"]:
        py = row.get("python")
        ref = ("%9.1f %6.1fms %6.1fms | %6.2fx %6.2fx" % (py["rps"], py["p50"], py["p99"],
                                                         row["ratio_rps"], row["ratio_p50"])
               if py else "%9s %8s %8s | %7s %7s" % ("-", "-", "-", "-", "-"))
        errs = row.get("socket_errors", 0)
        print("%4d %8d %8.1f %7.1fms %7.1fms %7.1fms %6s %6s | %s%s"
              % (row["concurrency"], row["requests"], row["rps"] or 0, row["p50"] or 0, row["p99"] or 0,
                 row["max"] or 0, row["non2xx"], row["not_ok"], ref,
                 ("   socket errors: %d" % errs) if errs else ""))
    print("(x rate: kiln req/s / bare python starts/s; x p50: kiln p50 / bare python p50. "
          "py3: the same number of `/usr/bin/python3 -c 'print(1)'` starts at the same concurrency)")
    print()
    print("server's /metrics over each run (executions by status; rejections by reason):")
    for row in r["rows"]:
        print("  c=%-3d %s" % (row["concurrency"], json.dumps(row["server"], sort_keys=True)))
    print()
    print("commands (the Lua script is below; KEY: the API key the server printed):")
    for row in r["rows"]:
        print("  %s" % row["command"])
    print("reproduce: %s" % r["reproduce"])
    print()
    print("post.lua:")
    print(r["lua"].rstrip())


if __name__ == "__main__":
    sys.exit(main())
