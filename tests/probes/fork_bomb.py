# Forks until the kernel refuses. Each child execs sleep with the test's
# marker as argv[0], so the host can look for survivors with `pgrep -f`.
import time

forks = 0
try:
    while True:
        pid = os.fork()
        if pid == 0:
            try:
                os.execv("/usr/bin/sleep", ["@MARKER@", "300"])
            finally:
                os._exit(1)
        forks += 1
except OSError as e:
    print(f"forks={forks} {type(e).__name__} {errname(e.errno)}", flush=True)
