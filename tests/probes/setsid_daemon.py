# The classic daemon: fork, setsid, fork again, exec a long sleeper carrying
# the test's marker; the middle process reports the grandchild's pid and exits.
# The program then checks the daemon really runs and returns at once.
import time

r, w = os.pipe()
middle = os.fork()
if middle == 0:
    os.close(r)
    os.setsid()
    grandchild = os.fork()
    if grandchild == 0:
        os.execv("/usr/bin/python3",
                 ["/usr/bin/python3", "-c", "import time; time.sleep(600)  # @MARKER@"])
    os.write(w, str(grandchild).encode())
    os._exit(0)
os.close(w)
daemon_pid = int(os.read(r, 32))
os.waitpid(middle, 0)
running = False
for _ in range(200):
    try:
        with open(f"/proc/{daemon_pid}/cmdline", "rb") as f:
            if b"@MARKER@" in f.read():
                running = True
                break
    except OSError:
        pass
    time.sleep(0.01)
print(f"daemon running={running} sid_leader={os.getsid(daemon_pid) != os.getsid(0)}", flush=True)
