# Prepended to every escape probe: tiny helpers that attempt one act and print
# how it ended, in a fixed format the C++ tests compare exactly.
import ctypes
import errno
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def errname(e):
    return errno.errorcode.get(e, str(e))


def sys_call(nr, *args):
    """Raw syscall(2); returns (ret, errno name or 'OK')."""
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return ret, ("OK" if ret >= 0 else errname(ctypes.get_errno()))


def report_syscall(label, nr, *args):
    ret, err = sys_call(nr, *args)
    print(f"{label}: {err}")


def attempt(label, fn):
    """Runs fn(); prints 'label: OK' or 'label: <ERRNO NAME>'."""
    try:
        fn()
    except OSError as e:
        print(f"{label}: {errname(e.errno)}")
    else:
        print(f"{label}: OK")
    sys.stdout.flush()


_keep = []


def cstr(s):
    """Address of a NUL-terminated copy of s, kept alive for the run."""
    buf = ctypes.create_string_buffer(s.encode() if isinstance(s, str) else s)
    _keep.append(buf)
    return ctypes.addressof(buf)


def zeroed(size):
    """Address of `size` zero bytes, kept alive for the run."""
    buf = ctypes.create_string_buffer(size)
    _keep.append(buf)
    return ctypes.addressof(buf)
