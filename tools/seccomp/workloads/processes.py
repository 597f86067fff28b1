# Workload for tools/seccomp/measure.py: child processes, from fork to multiprocessing.
import multiprocessing as mp
import os
import subprocess
import sys

def attempt(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        print(type(e).__name__, e)

print(subprocess.run(["ls", "-la", "/"], capture_output=True).returncode)
print(subprocess.run(["sh", "-c", "echo hi | wc -c; cat /etc/os-release >/dev/null; date; id"],
                     capture_output=True, text=True).stdout)
print(subprocess.run(["/usr/bin/env"], capture_output=True).returncode)
print(subprocess.run([sys.executable, "-c", "import json; print(json.dumps([1]))"],
                     capture_output=True).stdout)
attempt(lambda: subprocess.run(["grep", "-c", "x", "/etc/passwd"], capture_output=True))
attempt(lambda: subprocess.run(["sed", "s/a/b/", "/etc/hostname"], capture_output=True))
attempt(lambda: subprocess.run(["tar", "czf", "a.tgz", "/etc/hostname"], capture_output=True))
pid = os.fork()
if pid == 0:
    os._exit(3)
print(os.waitpid(pid, 0))
attempt(lambda: print(os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG)))
pid = os.posix_spawn("/bin/true", ["true"], {})
print(os.waitpid(pid, 0))
p = subprocess.Popen(["sleep", "5"])
p.terminate()
p.wait()

def square(x):
    return x * x

if __name__ == "__main__":
    for method in ("fork", "spawn", "forkserver"):
        try:
            ctx = mp.get_context(method)
            with ctx.Pool(2) as pool:
                print(method, sum(pool.map(square, range(50))))
        except Exception as e:  # noqa: BLE001
            print(method, type(e).__name__, e)
    q = mp.Queue()
    pr = mp.Process(target=q.put, args=(1,))
    pr.start()
    print(q.get(timeout=30))
    pr.join()
    attempt(lambda: mp.Lock().acquire())
    attempt(lambda: mp.Value("i", 1))

    def shm():
        from multiprocessing import shared_memory
        s = shared_memory.SharedMemory(create=True, size=1024)
        s.close()
        s.unlink()
    attempt(shm)
    print("ok")
