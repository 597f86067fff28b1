"""Start-up latency of the runtime, measured through the test harness (not a test).

    cd runtime && /usr/bin/python3 -m compileall -q kiln_runtime \
        && /usr/bin/python3 -m tests.bench_startup [runs]

hello: from spawning the runtime to its hello frame.  first cell: from sending
``execute print(1)`` (open policy) to its execute_reply.  total: spawn to exit
after shutdown.  bare: ``/usr/bin/python3 -c 'print(1)'`` for comparison.
Medians (and min) in ms over ``runs`` (default 30).
"""

import statistics
import subprocess
import sys
import time

from tests.harness import PYTHON, Runtime


def _ms(values):
    return "median %6.2f ms  min %6.2f ms" % (statistics.median(values) * 1e3,
                                             min(values) * 1e3)


def main(runs=30):
    hello, first, total, bare = [], [], [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([PYTHON, "-c", "print(1)"], stdout=subprocess.DEVNULL, check=True)
        bare.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        rt = Runtime()
        try:
            rt.hello()
            t1 = time.perf_counter()
            frames = rt.execute("print(1)")
            t2 = time.perf_counter()
            assert frames[-1]["status"] == "ok", frames
            assert rt.shutdown() == 0 and rt.stdout == "1\n", (rt.stdout, rt.stderr)
            t3 = time.perf_counter()
        finally:
            rt.kill()
        hello.append(t1 - t0)
        first.append(t2 - t1)
        total.append(t3 - t0)
    print("bare python3 -c print(1): %s" % _ms(bare))
    print("hello:                    %s" % _ms(hello))
    print("first cell print(1):      %s" % _ms(first))
    print("spawn..exit:              %s" % _ms(total))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
