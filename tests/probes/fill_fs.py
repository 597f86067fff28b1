# Fills the filesystem holding @DIR@ with files of at most @FILE_MIB@ MiB each
# until a write fails. os.write (unbuffered) so every byte that landed is
# counted, short writes included. Prints "<ERRNO> total=<bytes>".
DIR = "@DIR@"
FILE_BYTES = @FILE_MIB@ << 20
chunk = b"k" * (1 << 20)
total = 0
index = 0
failure = None
while failure is None:
    fd = os.open(f"{DIR}/kiln-fill-{index}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    written = 0
    try:
        while written < FILE_BYTES:
            n = os.write(fd, chunk[: min(len(chunk), FILE_BYTES - written)])
            written += n
            total += n
    except OSError as e:
        failure = errname(e.errno)
    finally:
        os.close(fd)
    index += 1
    if index > 10000:
        failure = "NEVER_FULL"
print(f"{failure} total={total}")
