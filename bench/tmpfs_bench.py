#!/usr/bin/python3
"""The cost of making a sandbox's tmpfs outside it (docs/adr/0017), side by side.

  made outside   what the supervisor and the pool now do, as the host's root:
                 fsopen("tmpfs"), fsconfig source/size/mode, FSCONFIG_CMD_CREATE,
                 fsmount (nosuid, nodev, noexec), fchownat of its root, then
                 move_mount onto a directory (what the child does with the fd)
  mounted here   what the child did before: mount(2) of a tmpfs with
                 size=,mode=,uid=,gid= on the same directory

Both end with umount2 of the directory, so each round makes and destroys one
tmpfs. Interleaved in rounds, in one private mount namespace of this process
(unshare(CLONE_NEWNS) first: nothing reaches the host's mount table). Root only.

  sudo /usr/bin/python3 bench/tmpfs_bench.py [--rounds N]

Prints the median and p90 per tmpfs of each, their ratio, and the load average.
"""
import argparse
import ctypes
import os
import statistics
import tempfile
import time

SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT, SYS_MOVE_MOUNT = 430, 431, 432, 429
FSOPEN_CLOEXEC, FSMOUNT_CLOEXEC = 1, 1
FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 1, 6
MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 0x2, 0x4, 0x8
MOVE_MOUNT_F_EMPTY_PATH = 0x4
AT_EMPTY_PATH, AT_FDCWD = 0x1000, -100
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
MNT_DETACH = 2
CLONE_NEWNS = 0x00020000

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def check(rc, what):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))
    return rc


def made_outside(target):
    fs = check(libc.syscall(SYS_FSOPEN, b"tmpfs", FSOPEN_CLOEXEC), "fsopen")
    for key, value in ((b"source", b"tmpfs"), (b"size", b"67108864"), (b"mode", b"1777")):
        check(libc.syscall(SYS_FSCONFIG, fs, FSCONFIG_SET_STRING, key, value, 0), "fsconfig")
    check(libc.syscall(SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0), "create")
    attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC
    mnt = check(libc.syscall(SYS_FSMOUNT, fs, FSMOUNT_CLOEXEC, attr), "fsmount")
    os.close(fs)
    check(libc.fchownat(mnt, b"", 54321, 54321, AT_EMPTY_PATH), "fchownat")
    check(libc.syscall(SYS_MOVE_MOUNT, mnt, b"", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH),
          "move_mount")
    os.close(mnt)
    check(libc.umount2(target, MNT_DETACH), "umount2")


def mounted_here(target):
    data = b"size=67108864,mode=1777,uid=54321,gid=54321"
    check(libc.mount(b"tmpfs", target, b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, data), "mount")
    check(libc.umount2(target, MNT_DETACH), "umount2")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("tmpfs_bench: run as root (fsopen in the host's namespace needs it)")
    check(libc.unshare(CLONE_NEWNS), "unshare")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    target = tempfile.mkdtemp(prefix="kiln-tmpfs-bench-").encode()
    times = {"made outside": [], "mounted here": []}
    candidates = [("made outside", made_outside), ("mounted here", mounted_here)]
    try:
        for i in range(args.rounds):
            order = candidates if i % 2 == 0 else candidates[::-1]
            for name, fn in order:
                t = time.perf_counter()
                fn(target)
                times[name].append((time.perf_counter() - t) * 1e6)
    finally:
        os.rmdir(target)
    load = os.getloadavg()
    print("tmpfs_bench: %d rounds, load average %.2f %.2f %.2f" % ((args.rounds,) + load))
    med = {}
    for name, t in times.items():
        t.sort()
        med[name] = statistics.median(t)
        print("  %-13s median %6.1f us  p90 %6.1f us" % (name, med[name], t[int(len(t) * 0.9)]))
    print("  made outside / mounted here: %.2fx" % (med["made outside"] / med["mounted here"]))


if __name__ == "__main__":
    main()
