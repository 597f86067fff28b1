// Escape tier: hogging the disk. Reads that bypass the page cache (O_DIRECT)
// from a read-only bind on a real block device must run at about the rate the
// profile's [io] table allows (cgroup v2 io.max, v1 blkio.throttle.*), not at
// the disk's. The workspace, /tmp and /dev/shm are tmpfs (no block device, so
// nothing to throttle there): the probe reads a large file of /usr, which is
// bound read-only at the same path. Skips, with the reason, where the host
// cannot throttle (no io/blkio controller, /usr on overlayfs or virtiofs...:
// testlib's HostIoThrottle, which doctor's "io limits" row must agree with)
// or where the disk is too slow to tell a cap from its own speed.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "testlib/host_facts.h"
#include "testlib/kiln_runner.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1 << 20;

class IoEscape : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    KILN_REQUIRE_CGROUP_LIMITS();
    if (TestBackend() == "gvisor")
      GTEST_SKIP() << "gVisor: the Sentry does not pass O_DIRECT through to the host (its own "
                      "page cache serves the reads), so an uncached read cannot be timed; the "
                      "caps apply to runsc's host reads (docs/threat-model.md)";
    if (!HostIoThrottle().present)
      GTEST_SKIP() << "no I/O throttling here: " << HostIoThrottle().detail;
    file_ = LargeFileOnUsrDevice(16 * kMiB);
    if (file_.empty())
      GTEST_SKIP() << "no file of 16 MiB or more under /usr on /usr's device to read";
    WriteFile(dir_.path() + "/kiln.toml", R"(
[profiles.open]
interpreter = "/usr/bin/python3"
[profiles.open.io]
read_bps = "max"
read_iops = "max"

[profiles.bps]
interpreter = "/usr/bin/python3"
[profiles.bps.io]
read_bps = "4m"
read_iops = "max"

[profiles.iops]
interpreter = "/usr/bin/python3"
[profiles.iops.io]
read_bps = "max"
read_iops = 25
)");
  }

  // The first regular file of at least `size` bytes under /usr/lib or
  // /usr/share on the same device as /usr (so inside the sandbox's /usr bind).
  static std::string LargeFileOnUsrDevice(uint64_t size) {
    struct stat usr {};
    if (::stat("/usr", &usr) != 0) return "";
    for (const char* top : {"/usr/lib", "/usr/share"}) {
      std::error_code ec;
      fs::recursive_directory_iterator it(top, fs::directory_options::skip_permission_denied, ec);
      for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code e2;
        if (!it->is_regular_file(e2) || it->is_symlink(e2) || it->file_size(e2) < size) continue;
        struct stat st {};
        const std::string p = it->path().string();
        // World-readable: the sandbox reads as an unprivileged uid.
        if (::stat(p.c_str(), &st) == 0 && st.st_dev == usr.st_dev && (st.st_mode & S_IROTH))
          return p;
      }
    }
    return "";
  }

  struct Reading {
    double secs = -1;
    uint64_t bytes = 0, ops = 0;
    std::string describe;
  };

  // O_DIRECT reads of `total` bytes in `chunk`-sized requests, timed inside.
  Reading ReadDirect(const std::string& profile, uint64_t total, uint64_t chunk) {
    const std::string code = ReplaceAll(ReplaceAll(ReplaceAll(R"PY(
import mmap, os, time
fd = os.open("@PATH@", os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, @CHUNK@)  # page-aligned, as O_DIRECT wants
done = ops = 0
t0 = time.monotonic()
while done < @TOTAL@:
    n = os.preadv(fd, [buf], done)
    if n <= 0:
        break
    done += n
    ops += 1
print(f"bytes={done} ops={ops} secs={time.monotonic() - t0:.3f}")
)PY",
                                                              "@PATH@", file_),
                                                   "@CHUNK@", std::to_string(chunk)),
                                        "@TOTAL@", std::to_string(total));
    const JsonRun r = RunPython(
        code, {"--config", dir_.path() + "/kiln.toml", "--profile", profile, "--timeout", "60"});
    Reading out;
    out.describe = r.Describe();
    EXPECT_EQ(r.status(), "ok") << r.Describe();
    unsigned long long b = 0, o = 0;
    double s = -1;
    if (std::sscanf(r.out().c_str(), "bytes=%llu ops=%llu secs=%lf", &b, &o, &s) == 3) {
      out.bytes = b;
      out.ops = o;
      out.secs = s;
    }
    return out;
  }

  TempDir dir_;
  std::string file_;
};

TEST_F(IoEscape, ODirectReadsRunAtTheProfilesByteRate) {
  // Layer: io.max rbps / blkio.throttle.read_bps_device (4 MiB/s). 12 MiB
  // should take about 3 s; uncapped, the same reads show the disk's speed.
  const uint64_t total = 12 * kMiB;
  const Reading open = ReadDirect("open", total, kMiB);
  ASSERT_EQ(open.bytes, total) << open.describe;
  if (open.secs > 1.0) {
    GTEST_SKIP() << "the disk itself reads 12 MiB in " << open.secs
                 << " s with O_DIRECT: too slow to tell a 4 MiB/s cap from it";
  }
  const Reading capped = ReadDirect("bps", total, kMiB);
  ASSERT_EQ(capped.bytes, total) << capped.describe;
  EXPECT_GE(capped.secs, 2.0) << "12 MiB at a 4 MiB/s cap (uncapped: " << open.secs << " s)\n"
                              << capped.describe;
  EXPECT_LE(capped.secs, 9.0) << capped.describe;
}

TEST_F(IoEscape, ODirectReadsRunAtTheProfilesIopsRate) {
  // Layer: io.max riops / blkio.throttle.read_iops_device (25/s). 75 reads
  // of 4 KiB should take about 3 s.
  const uint64_t total = 75 * 4096;
  const Reading open = ReadDirect("open", total, 4096);
  ASSERT_EQ(open.ops, 75u) << open.describe;
  if (open.secs > 1.0) {
    GTEST_SKIP() << "the disk itself does 75 O_DIRECT reads in " << open.secs
                 << " s: too slow to tell a 25 iops cap from it";
  }
  const Reading capped = ReadDirect("iops", total, 4096);
  ASSERT_EQ(capped.ops, 75u) << capped.describe;
  EXPECT_GE(capped.secs, 2.0) << "75 reads at a 25 iops cap (uncapped: " << open.secs << " s)\n"
                              << capped.describe;
  EXPECT_LE(capped.secs, 9.0) << capped.describe;
}

}  // namespace
}  // namespace kiln::testing
