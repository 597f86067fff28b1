#!/usr/bin/python3
"""Latency of a one-shot execution with input files, for two kiln binaries side by side.

    /usr/bin/python3 bench/files_bench.py --kiln ./build/kiln --baseline OLD/kiln [--runs 15]

Input files used to travel to the supervisor as base64 inside the job's JSON frame (encoded by
the server, decoded by the supervisor, then copied into a memfd); they now travel as sealed
memfds beside the job's plan (docs/protocol.md section 5). This bench starts one `kiln serve`
per binary (the repository's kiln.toml, as bench/http_bench.py configures it), then for each
payload (one file of 1 MiB, one of 8 MiB, 64 files of 64 KiB) sends POST /v1/execute with
`files` (content_base64) and code that checks the workspace got them, alternating between the
two servers request by request so that both see the same noise. It prints p50/p90 per binary
and the ratio new/baseline, with the load average. It measures; it asserts nothing.
"""

import argparse
import base64
import json
import os
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_bench import REPO, Server, bench_config, pct  # noqa: E402

CODE = ("import os\n"
        "n = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk('.') for f in fs)\n"
        "print(n)\n")


def payloads():
    return {
        "1 x 1 MiB": [("data.bin", os.urandom(1 << 20))],
        "1 x 8 MiB": [("data.bin", os.urandom(8 << 20))],
        "64 x 64 KiB": [("d/f%02d.bin" % i, os.urandom(64 << 10)) for i in range(64)],
    }


def post(server, body):
    req = urllib.request.Request(server.url + "/v1/execute", data=body, method="POST",
                                 headers={"Authorization": "Bearer " + server.key,
                                          "Content-Type": "application/json"})
    t = time.monotonic()
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=120) as r:
        out = json.loads(r.read())
    return (time.monotonic() - t) * 1000, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--baseline", required=True, help="the kiln binary to compare with")
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    env = dict(os.environ, PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    tmp = tempfile.mkdtemp(prefix="kiln-files-bench-")
    servers = {}
    try:
        for name, binary in (("new", a.kiln), ("baseline", a.baseline)):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            cfg = os.path.join(d, "kiln.toml")
            bench_config(os.path.join(REPO, "kiln.toml"), cfg)
            servers[name] = Server(os.path.abspath(binary), cfg, d, env)
        print("load average before: %.2f %.2f %.2f" % os.getloadavg())
        for label, files in payloads().items():
            want = sum(len(b) for _, b in files)
            body = json.dumps({"code": CODE, "files": [
                {"path": p, "content_base64": base64.b64encode(b).decode()} for p, b in files]}
            ).encode()
            times = {name: [] for name in servers}
            for i in range(a.runs + 2):
                for name, s in servers.items():
                    ms, out = post(s, body)
                    if out.get("status") != "ok" or out.get("stdout", "").strip() != str(want):
                        sys.exit("%s: wrong answer: %s" % (name, json.dumps(out)[:500]))
                    if i >= 2:  # two warm-up rounds
                        times[name].append(ms)
            new, old = pct(times["new"], 0.5), pct(times["baseline"], 0.5)
            print("%-12s p50 new %7.1f ms  baseline %7.1f ms  new/baseline %.2fx   "
                  "p90 new %7.1f  baseline %7.1f" % (label, new, old, new / old,
                                                     pct(times["new"], 0.9),
                                                     pct(times["baseline"], 0.9)))
        print("load average after: %.2f %.2f %.2f" % os.getloadavg())
    finally:
        for s in servers.values():
            s.stop()


if __name__ == "__main__":
    main()
