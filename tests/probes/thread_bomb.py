# Starts threads (all parked on one event) until that fails, then releases and
# joins them: the program must end normally.
import threading

release = threading.Event()
threads = []
failure = "none"
while len(threads) < 10000:
    t = threading.Thread(target=release.wait)
    try:
        t.start()
    except RuntimeError as e:
        failure = f"{type(e).__name__}: {e}"
        break
    threads.append(t)
release.set()
for t in threads:
    t.join()
print(f"threads={len(threads)} failure={failure}", flush=True)
