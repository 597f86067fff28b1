// Escape tier: the filesystem. Each test attempts one act inside `kiln run`
// and asserts exactly how it was refused, naming the layer that refused it.
//
// The sandbox's tree (src/isolation/mount_ns.cc): a 1 MiB tmpfs root
// (read-only after pivot_root) holding only mount points and a few /etc files;
// /usr and the merged-/usr symlinks bound read-only; a fresh /proc with masks;
// a /dev tmpfs with five bound device nodes; /tmp (64 MiB), /workspace (--disk)
// and /dev/shm tmpfs, all noexec. Landlock allows writes only beneath the
// writable mounts.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

class FilesystemEscape : public SandboxTest {};

// "ENOSPC total=123" -> the byte count; -1 when the line does not parse.
long long TotalFrom(const std::string& out) {
  const auto pos = out.find("total=");
  if (pos == std::string::npos) return -1;
  return std::atoll(out.c_str() + pos + 6);
}

TEST_F(FilesystemEscape, HostShadowFileIsNotInTheTree) {
  // Layer: mount namespace. The sandbox's /etc is a tmpfs with a handful of
  // generated files; the host's /etc/shadow is simply not there, so the
  // answer is ENOENT, not EACCES (which would reveal that it exists).
  if (!std::filesystem::exists("/etc/shadow"))
    GTEST_SKIP() << "the host has no /etc/shadow to hide";
  const JsonRun r = RunProbe(R"PY(
attempt("open /etc/shadow", lambda: open("/etc/shadow", "rb").read())
attempt("stat /etc/shadow", lambda: os.stat("/etc/shadow"))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "open /etc/shadow: ENOENT\nstat /etc/shadow: ENOENT\n") << r.Describe();
}

TEST_F(FilesystemEscape, HostRootHomeIsNotInTheTree) {
  // Layer: mount namespace. The root is a fresh tmpfs; no /root mount point.
  if (!std::filesystem::is_directory("/root")) GTEST_SKIP() << "the host has no /root to hide";
  const JsonRun r = RunProbe(R"PY(
attempt("listdir /root", lambda: os.listdir("/root"))
attempt("open root's .bashrc", lambda: open(os.path.join("/root", ".bashrc"), "rb"))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "listdir /root: ENOENT\nopen root's .bashrc: ENOENT\n") << r.Describe();
}

TEST_F(FilesystemEscape, CreatingUnderUsrIsReadOnlyFilesystem) {
  // Layer: the read-only bind of /usr (MS_RDONLY on the mount). For a call
  // that creates, renames or removes, the VFS takes mnt_want_write() before
  // any permission or LSM hook, so the mount answers first: EROFS, even though
  // DAC (root-owned directories) and Landlock would refuse too.
  const std::string name = UniqueMarker("kiln-escape-usr");
  const JsonRun r = RunProbe("NAME = '" + name + R"PY('
attempt("create /usr/NAME", lambda: open("/usr/" + NAME, "w"))
attempt("mkdir /usr/lib/NAME", lambda: os.mkdir("/usr/lib/" + NAME))
attempt("unlink /usr/bin/true", lambda: os.unlink("/usr/bin/true"))
attempt("rename /usr/bin/true", lambda: os.rename("/usr/bin/true", "/usr/bin/" + NAME))
attempt("chmod /usr/bin/true", lambda: os.chmod("/usr/bin/true", 0o777))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  if (TestBackend() == "gvisor") {
    // gVisor checks permissions before its read-only root: EACCES where
    // uid 1000 may not write the directory, EPERM for chmod of root's file.
    EXPECT_EQ(r.out(),
              "create /usr/NAME: EACCES\n"
              "mkdir /usr/lib/NAME: EROFS\n"
              "unlink /usr/bin/true: EACCES\n"
              "rename /usr/bin/true: EROFS\n"
              "chmod /usr/bin/true: EPERM\n")
        << r.Describe();
  } else {
    EXPECT_EQ(r.out(),
              "create /usr/NAME: EROFS\n"
              "mkdir /usr/lib/NAME: EROFS\n"
              "unlink /usr/bin/true: EROFS\n"
              "rename /usr/bin/true: EROFS\n"
              "chmod /usr/bin/true: EROFS\n")
        << r.Describe();
  }
  EXPECT_FALSE(std::filesystem::exists("/usr/" + name));
  EXPECT_TRUE(std::filesystem::exists("/usr/bin/true"));
}

TEST_F(FilesystemEscape, OpeningAnExistingUsrFileForWriteIsAccessDenied) {
  // Layer: DAC. Opening an existing file for writing checks inode permission
  // (root-owned 0755, we are uid 1000) before the mount's read-only flag
  // (mnt_want_write comes later in do_open), so this one is EACCES, not EROFS.
  const JsonRun r = RunProbe(R"PY(
attempt("append /usr/bin/true", lambda: open("/usr/bin/true", "ab"))
attempt("write /etc/passwd", lambda: open("/etc/passwd", "r+b"))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "append /usr/bin/true: EACCES\nwrite /etc/passwd: EACCES\n") << r.Describe();
}

TEST_F(FilesystemEscape, RootOfTheTreeIsReadOnly) {
  // Layer: the root tmpfs is remounted read-only after pivot_root
  // (SetupStep kRemountRootRo): a new top-level entry is EROFS.
  const JsonRun r = RunProbe(R"PY(
attempt("create /planted", lambda: open("/planted", "w"))
attempt("mkdir /planted", lambda: os.mkdir("/planted"))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "create /planted: EROFS\nmkdir /planted: EROFS\n") << r.Describe();
}

TEST_F(FilesystemEscape, HostTmpIsInvisibleAndSandboxTmpStaysInside) {
  // Layer: mount namespace; the sandbox's /tmp is its own tmpfs. A file planted
  // in the host's /tmp is not visible inside, and a file written to /tmp
  // inside never reaches the host's /tmp.
  const std::string planted = UniqueMarker("kiln-escape-planted");
  const std::string inside = UniqueMarker("kiln-escape-inside");
  WriteFile("/tmp/" + planted, "host secret\n");
  ASSERT_TRUE(std::filesystem::exists("/tmp/" + planted));
  const JsonRun r = RunProbe("PLANTED = '" + planted + "'\nINSIDE = '" + inside + R"PY('
print("planted exists:", os.path.exists("/tmp/" + PLANTED))
print("planted listed:", PLANTED in os.listdir("/tmp"))
attempt("open planted", lambda: open("/tmp/" + PLANTED))
def write_inside():
    with open("/tmp/" + INSIDE, "w") as f:
        f.write("from the sandbox\n")
attempt("write inside", write_inside)
print("inside exists:", os.path.exists("/tmp/" + INSIDE))
)PY");
  std::filesystem::remove("/tmp/" + planted);
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(),
            "planted exists: False\n"
            "planted listed: False\n"
            "open planted: ENOENT\n"
            "write inside: OK\n"
            "inside exists: True\n")
      << r.Describe();
  EXPECT_FALSE(std::filesystem::exists("/tmp/" + inside))
      << "a file written to /tmp inside the sandbox appeared in the host's /tmp";
}

TEST_F(FilesystemEscape, FillingTmpStopsAtItsCapWithENOSPC) {
  // Layer: the size= option of the /tmp tmpfs (64 MiB). Files of 8 MiB stay
  // below RLIMIT_FSIZE (the --disk size, 128 MiB by default), so the tmpfs
  // cap is what stops the writes.
  const std::string code =
      ReplaceAll(ReplaceAll(ReadProbe("fill_fs.py"), "@DIR@", "/tmp"), "@FILE_MIB@", "8");
  const JsonRun r = RunProbe(code);
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  ASSERT_EQ(r.out().rfind("ENOSPC total=", 0), 0u) << r.Describe();
  const long long total = TotalFrom(r.out());
  constexpr long long kCap = 64LL << 20;
  // The matplotlib font cache already lives in /tmp, so a little less fits.
  EXPECT_LE(total, kCap) << r.Describe();
  EXPECT_GE(total, kCap - (4LL << 20)) << r.Describe();
}

TEST_F(FilesystemEscape, FillingTheWorkspaceStopsAtDiskWithENOSPC) {
  // Layer: the size= option of the /workspace tmpfs (--disk 8m). Files of
  // 1 MiB each, so RLIMIT_FSIZE (also 8 MiB) cannot be what stops them.
  const std::string code =
      ReplaceAll(ReplaceAll(ReadProbe("fill_fs.py"), "@DIR@", "/workspace"), "@FILE_MIB@", "1");
  const JsonRun r = RunProbe(code, {"--disk", "8m"});
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  ASSERT_EQ(r.out().rfind("ENOSPC total=", 0), 0u) << r.Describe();
  const long long total = TotalFrom(r.out());
  EXPECT_LE(total, 8LL << 20) << r.Describe();
  EXPECT_GE(total, 7LL << 20) << r.Describe();
}

TEST_F(FilesystemEscape, OneFileLargerThanDiskIsEFBIG) {
  // Layer: RLIMIT_FSIZE (set to the --disk size, src/isolation/rlimits.cc).
  // A single file hits the rlimit exactly at the cap, before the tmpfs is full;
  // Python ignores SIGXFSZ, so the write fails with EFBIG instead of killing.
  const std::string code =
      ReplaceAll(ReplaceAll(ReadProbe("fill_fs.py"), "@DIR@", "/workspace"), "@FILE_MIB@", "64");
  const JsonRun r = RunProbe(code, {"--disk", "8m"});
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), "EFBIG total=" + std::to_string(8LL << 20) + "\n") << r.Describe();
}

TEST_F(FilesystemEscape, WritableMountsAreNoexec) {
  // Layer: MS_NOEXEC on /tmp, /workspace and /dev/shm: execve of a copied
  // binary is EACCES (PermissionError). The same binary runs from /usr, so the
  // refusal is the mount flag, not the file.
  const JsonRun r = RunProbe(R"PY(
import shutil, subprocess
print("from /usr:", subprocess.run(["/usr/bin/true"]).returncode)
for d in ("/tmp", "/workspace", "/dev/shm"):
    path = d + "/true-copy"
    shutil.copy("/usr/bin/true", path)
    os.chmod(path, 0o755)
    try:
        subprocess.run([path])
        print(d + ": ran")
    except PermissionError as e:
        print(d + ": PermissionError " + errname(e.errno))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(),
            "from /usr: 0\n"
            "/tmp: PermissionError EACCES\n"
            "/workspace: PermissionError EACCES\n"
            "/dev/shm: PermissionError EACCES\n")
      << r.Describe();
}

TEST_F(FilesystemEscape, NothingWrittenInTheSandboxIsExecutable) {
  // Layer: Landlock grants execute only beneath the read-only trees (/usr,
  // kiln's own), so a copy that dodges a mount flag still cannot run; a memfd
  // (on no mount of the sandbox's) is refused by vm.memfd_noexec = 2 in the
  // sandbox's pid namespace: created sealed non-executable, MFD_EXEC refused.
  // The sysctl needs kernel >= 6.3 and a root supervisor (it is set while
  // pid 1's euid is still the host's root).
  // On gVisor the refusal is the seccomp filter's, on any host.
  std::error_code ec;
  if (TestBackend() != "gvisor" && !std::filesystem::exists("/proc/sys/vm/memfd_noexec", ec)) {
    GTEST_SKIP() << "the kernel has no vm.memfd_noexec (Linux < 6.3)";
  }
  if (TestBackend() != "gvisor" && ::geteuid() != 0)
    GTEST_SKIP() << "vm.memfd_noexec is set for the sandbox only by a root kiln";
  const JsonRun r = RunProbe(R"PY(
import subprocess
try:
    # Linux 6.3-6.5 refuse, at 2, a memfd without MFD_NOEXEC_SEAL outright.
    fd = os.memfd_create("copy", 0)
    os.write(fd, open("/usr/bin/true", "rb").read())
    subprocess.run(["/proc/self/fd/%d" % fd], pass_fds=(fd,))
    print("memfd: ran")
except PermissionError as e:
    print("memfd: PermissionError " + errname(e.errno))
try:
    os.memfd_create("exec", 0x10)  # MFD_EXEC
    print("MFD_EXEC: created")
except OSError as e:
    print("MFD_EXEC: " + errname(e.errno))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  if (TestBackend() == "gvisor") {
    // gVisor has no vm.memfd_noexec: the gVisor backend's seccomp filter
    // refuses memfd_create itself (SeccompOptions::refuse_memfd), so no code
    // can be written to a memfd to run; EPERM from the filter, whatever the flags.
    EXPECT_EQ(r.out(), "memfd: PermissionError EPERM\nMFD_EXEC: EPERM\n") << r.Describe();
    return;
  }
  EXPECT_EQ(r.out(), "memfd: PermissionError EACCES\nMFD_EXEC: EACCES\n") << r.Describe();
}

TEST_F(FilesystemEscape, DevHoldsOnlyTheHarmlessNodes) {
  // Layer: the /dev tmpfs (read-only) with five bound nodes; device nodes
  // cannot be created in a user namespace, so nothing else can appear.
  const JsonRun r = RunProbe(R"PY(
print(" ".join(sorted(os.listdir("/dev"))))
fd = os.open("/dev/null", os.O_WRONLY)
print("write /dev/null:", os.write(fd, b"hello"))
os.close(fd)
attempt("mknod /dev/sda", lambda: os.mknod("/dev/sda", 0o600 | 0o060000, os.makedev(8, 0)))
attempt("mknod /tmp/mem", lambda: os.mknod("/tmp/mem", 0o600 | 0o020000, os.makedev(1, 1)))
attempt("mkfifo /tmp/fifo", lambda: os.mkfifo("/tmp/fifo"))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  // /dev is a read-only tmpfs: EROFS (the mount, before anything else).
  // In the writable /tmp, a device node is refused by Landlock, which grants
  // MAKE_CHAR/MAKE_BLOCK nowhere: EACCES from security_path_mknod, which runs
  // before vfs_mknod's CAP_MKNOD check (EPERM). A FIFO in the same directory
  // is allowed, so neither DAC nor the mount is what refused the device.
  if (TestBackend() == "gvisor") {
    // gVisor's own /dev (the Sentry's nodes, not the host's): more entries;
    // device nodes are refused by permission (EACCES) and capability (EPERM).
    EXPECT_EQ(r.out(),
              "fd full fuse net null ptmx pts random shm stderr stdin stdout tty urandom zero\n"
              "write /dev/null: 5\n"
              "mknod /dev/sda: EACCES\n"
              "mknod /tmp/mem: EPERM\n"
              "mkfifo /tmp/fifo: OK\n")
        << r.Describe();
    return;
  }
  EXPECT_EQ(r.out(),
            "fd full null random shm stderr stdin stdout urandom zero\n"
            "write /dev/null: 5\n"
            "mknod /dev/sda: EROFS\n"
            "mknod /tmp/mem: EACCES\n"
            "mkfifo /tmp/fifo: OK\n")
      << r.Describe();
}

TEST_F(FilesystemEscape, SensitiveProcFilesAreMasked) {
  // Layer: mount namespace. /proc entries that reveal or poke the host are
  // covered with /dev/null (files) or an empty read-only tmpfs (directories),
  // as runc does. An entry the host kernel does not have (no /proc/kcore
  // without CONFIG_PROC_KCORE, no /proc/acpi with acpi=off) must stay absent.
  const char* files[] = {"kcore", "keys", "timer_list", "kallsyms", "kmsg", "sysrq-trigger",
                         // host-wide state: other tenants' load, the host's disks and boot line
                         "loadavg", "buddyinfo", "zoneinfo", "interrupts", "softirqs", "diskstats",
                         "partitions", "cmdline", "schedstat", "swaps"};
  std::string code = "for name in [";
  std::string expected;
  for (const char* f : files) {
    code += std::string("'") + f + "',";
    const bool on_host = std::filesystem::exists(std::string("/proc/") + f);
    expected += std::string(f) + (on_host ? ": masked\n" : ": ENOENT\n");
  }
  code += R"PY(]:
    try:
        st = os.stat("/proc/" + name)
        with open("/proc/" + name, "rb") as f:
            data = f.read()
        null = os.stat("/dev/null").st_rdev
        print(name + (": masked" if st.st_rdev == null and data == b"" else ": READABLE"))
    except OSError as e:
        print(name + ": " + errname(e.errno))
for d in ("sys", "fs", "irq", "bus", "acpi", "pressure"):
    try:
        print(d + ":", sorted(os.listdir("/proc/" + d)))
    except OSError as e:
        print(d + ": " + errname(e.errno))
attempt("write /proc/sys/kernel/hostname", lambda: open("/proc/sys/kernel/hostname", "w"))
)PY";
  for (const char* d : {"sys", "fs", "irq", "bus", "acpi", "pressure"}) {
    const bool on_host = std::filesystem::is_directory(std::string("/proc/") + d);
    expected += std::string(d) + (on_host ? ": []\n" : ": ENOENT\n");
  }
  expected += "write /proc/sys/kernel/hostname: ENOENT\n";
  if (TestBackend() == "gvisor") {
    // gVisor's /proc is the Sentry's: the host-wide files do not exist;
    // loadavg and cmdline are its own ("0.00 0.00 0.00 0/0 0", a 4.4.0
    // "gvisor" boot line), not the host's; /proc/sys is its few entries.
    expected =
        "kcore: ENOENT\nkeys: ENOENT\ntimer_list: ENOENT\nkallsyms: ENOENT\nkmsg: ENOENT\n"
        "sysrq-trigger: ENOENT\nloadavg: READABLE\nbuddyinfo: ENOENT\nzoneinfo: ENOENT\n"
        "interrupts: ENOENT\nsoftirqs: ENOENT\ndiskstats: ENOENT\npartitions: ENOENT\n"
        "cmdline: READABLE\nschedstat: ENOENT\nswaps: ENOENT\n"
        "sys: ['kernel', 'net', 'vm']\nfs: ENOENT\nirq: ENOENT\nbus: ENOENT\nacpi: ENOENT\n"
        "pressure: ENOENT\nwrite /proc/sys/kernel/hostname: EACCES\n";
    // Its boot line varies with the runsc version: what matters is that it
    // is not the host's (read here, outside), so it is printed apart.
    code += "print(open('/proc/loadavg').read(), end='')\n";
    code += "print('cmdline=' + open('/proc/cmdline').read().strip())\n";
    expected += "0.00 0.00 0.00 0/0 0\n";
    const JsonRun r = RunProbe(code);
    ASSERT_EQ(r.status(), "ok") << r.Describe();
    const std::string out = r.out();
    const size_t at = out.rfind("cmdline=");
    ASSERT_NE(at, std::string::npos) << r.Describe();
    EXPECT_EQ(out.substr(0, at), expected) << r.Describe();
    std::string inside = out.substr(at + 8);
    while (!inside.empty() && inside.back() == '\n') inside.pop_back();
    std::string host = ReadFile("/proc/cmdline").value_or("");
    while (!host.empty() && (host.back() == '\n' || host.back() == ' ')) host.pop_back();
    EXPECT_FALSE(inside.empty()) << r.Describe();
    EXPECT_NE(inside, host) << "the sandbox reads the host's boot line: " << r.Describe();
    return;
  }
  const JsonRun r = RunProbe(code);
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  EXPECT_EQ(r.out(), expected) << r.Describe();
}

// The path a bind of `dir` shows as its root (field 4 of mountinfo): its
// path relative to the root of the filesystem it lives on, from the host's
// own /proc/self/mountinfo. Empty when no mount holds it.
std::string PathOnItsFilesystem(const std::string& dir) {
  const std::optional<std::string> mountinfo = ReadFile("/proc/self/mountinfo");
  if (!mountinfo) return "";
  std::string best_point, best_root;
  for (const std::string& line : Lines(*mountinfo)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    if (!(fields >> id >> parent >> dev >> root >> point)) continue;
    const bool holds = point == "/" || dir == point || dir.rfind(point + "/", 0) == 0;
    // The longest mount point wins; of equal ones the later (it covers).
    if (holds && point.size() >= best_point.size()) {
      best_point = point;
      best_root = root;
    }
  }
  if (best_point.empty()) return "";
  const std::string rest = best_point == "/" ? dir : dir.substr(best_point.size());
  return best_root == "/" ? rest : best_root + rest;
}

TEST_F(FilesystemEscape, MountinfoNamesNoHostDirectoryOfKiln) {
  // Layer: mount namespace. A bind mount's root field in /proc/self/mountinfo
  // is its source's path on the host's filesystem, so a bound runtime
  // directory would tell the program where kiln lives (its checkout, build
  // or install tree). kiln's runtime and library are copied into tmpfs
  // mounts of their own instead: no field of any line may contain the host
  // paths of kiln's runtime, binary, libexec, source or data directories,
  // neither as the host sees them nor relative to their filesystem.
  std::vector<std::string> dirs;
  {
    const ProcessResult d = RunKiln({"doctor", "--json", "--no-smoke"});
    const auto j = nlohmann::json::parse(d.out, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("layers")) << d.out << d.err;
    for (const auto& layer : j["layers"]) {
      if (layer.value("name", "") == "runtime" && layer.value("state", "") == "available") {
        dirs.push_back(layer.value("detail", ""));
      }
    }
    ASSERT_EQ(dirs.size(), 1u) << "doctor names no runtime directory: " << d.out;
  }
  std::error_code ec;
  const std::filesystem::path bin = std::filesystem::canonical(KilnBin(), ec);
  ASSERT_FALSE(ec) << KilnBin();
  dirs.push_back(bin.parent_path().string());                            // build or bin directory
  dirs.push_back((bin.parent_path() / "libexec").string());              // kiln's helpers
  dirs.push_back(std::filesystem::canonical(SourceDir(), ec).string());  // the checkout
  dirs.push_back(::geteuid() == 0 ? "/var/lib/kiln" : "");               // the server's data
  std::vector<std::string> needles;
  for (const std::string& d : dirs) {
    if (d.empty()) continue;
    for (const std::string& n : {d, PathOnItsFilesystem(d)}) {
      // "/": the directory is a filesystem's root. Each needle once.
      if (n.size() > 1 && std::find(needles.begin(), needles.end(), n) == needles.end()) {
        needles.push_back(n);
      }
    }
  }
  const JsonRun r = RunProbe(R"PY(print(open("/proc/self/mountinfo").read(), end=""))PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  const std::vector<std::string> lines = Lines(r.out());
  ASSERT_GT(lines.size(), 5u) << r.Describe();
  for (const std::string& line : lines) {
    for (const std::string& n : needles) {
      EXPECT_EQ(line.find(n), std::string::npos)
          << "mountinfo names the host's '" << n << "': " << line;
    }
  }
}

TEST_F(FilesystemEscape, MountinfoNamesNoHostId) {
  // Layer: mount namespace. A tmpfs prints uid=/gid= of its creator's ids in
  // the host's namespace unless the creator was the host's root; as root,
  // kiln makes every tmpfs of the sandbox outside it (docs/adr/0017), so no
  // line may carry an id option, and the masked /proc directories are binds
  // of an empty directory. The sandbox still owns what it writes to.
  if (::geteuid() != 0) {
    GTEST_SKIP() << "kiln runs unprivileged here: its sandboxes' tmpfs carry the caller's own ids";
  }
  const JsonRun r = RunProbe(R"PY(
print(open("/proc/self/mountinfo").read(), end="")
st = os.stat("/workspace")
print("workspace", st.st_uid, st.st_gid, oct(st.st_mode & 0o7777))
print("tmp", oct(os.stat("/tmp").st_mode & 0o7777))
open("/workspace/w", "w").write("x")
open("/tmp/t", "w").write("x")
open("/dev/shm/s", "w").write("x")
print("wrote", os.stat("/workspace/w").st_uid)
print("empty", sorted(os.listdir("/var/empty")), sorted(os.listdir("/proc/sys")))
)PY");
  ASSERT_EQ(r.status(), "ok") << r.Describe();
  const std::vector<std::string> lines = Lines(r.out());
  int tmpfs = 0;
  for (const std::string& line : lines) {
    if (line.find(" - tmpfs ") != std::string::npos) ++tmpfs;
    // The super options (after " - TYPE SOURCE "): no uid=/gid= option
    // (an ext4's resuid= is the host filesystem's own, not the sandbox's).
    std::istringstream fields(line.substr(line.find(" - ") + 3));
    std::string type, source, options;
    fields >> type >> source >> options;
    std::istringstream opts(options);
    for (std::string o; std::getline(opts, o, ',');) {
      EXPECT_NE(o.rfind("uid=", 0), 0u) << "a mount names a host uid: " << line;
      EXPECT_NE(o.rfind("gid=", 0), 0u) << "a mount names a host gid: " << line;
    }
  }
  if (TestBackend() == "gvisor") {
    // gVisor: the root and the three tmpfs are served by the gofer (9p); the
    // tmpfs stay noexec; /dev is the Sentry's own tmpfs.
    for (const char* mount : {" /workspace rw,noexec  - 9p ", " /tmp rw,noexec  - 9p ",
                              " /dev/shm rw,noexec  - 9p ", " / ro  - 9p "}) {
      EXPECT_NE(r.out().find(mount), std::string::npos) << mount << "\n" << r.Describe();
    }
    EXPECT_NE(r.out().find("empty [] ['kernel', 'net', 'vm']\n"), std::string::npos)
        << r.Describe();
  } else {
    EXPECT_GE(tmpfs, 5) << r.Describe();
    EXPECT_NE(r.out().find("empty [] []\n"), std::string::npos) << r.Describe();
  }
  EXPECT_NE(r.out().find("workspace 1000 1000 0o755\n"), std::string::npos) << r.Describe();
  EXPECT_NE(r.out().find("tmp 0o1777\n"), std::string::npos) << r.Describe();
  EXPECT_NE(r.out().find("wrote 1000\n"), std::string::npos) << r.Describe();
}

}  // namespace
}  // namespace kiln::testing
