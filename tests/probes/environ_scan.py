# Looks for the supervisor's secret (variable @SECRET_NAME@) everywhere the
# program can read an environment: its own, and every /proc/*/environ. The
# value arrives reversed, so this program's own text (visible in /proc/1/cmdline
# as kiln's -c argument) never contains it.
SECRET = "@SECRET_REVERSED@"[::-1].encode()
print("os.environ:", "present" if "@SECRET_NAME@" in os.environ else "absent")
attempt("/proc/1/environ", lambda: open("/proc/1/environ", "rb").read())
readable, leaks = [], []
for entry in sorted(os.listdir("/proc")):
    if not (entry.isdigit() or entry in ("self", "thread-self")):
        continue
    try:
        with open(f"/proc/{entry}/environ", "rb") as f:
            data = f.read()
    except OSError:
        continue
    readable.append(entry)
    if SECRET in data:
        leaks.append(entry)
print("readable:", " ".join(readable))
print("leaks:", " ".join(leaks) or "none")
