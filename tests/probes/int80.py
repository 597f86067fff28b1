# An i386 system call (int 0x80, eax = 20 = getpid on i386) from a 64-bit
# process: seccomp sees AUDIT_ARCH_I386 and must kill the process, since no
# x86_64 rule would match the i386 numbering. On a host without IA32
# emulation the CPU faults (SIGSEGV) before any system call is made; the
# tests run this same probe in a bare Python first to know which to expect
# (tests/testlib/host_facts.h, HostIa32).
import mmap

code = bytes([0xB8, 20, 0, 0, 0,  # mov eax, 20
              0xCD, 0x80,         # int 0x80
              0xC3])              # ret
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print("before", flush=True)
print("after", fn(), flush=True)
