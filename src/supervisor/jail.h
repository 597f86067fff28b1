// Jail: the process side of one launched sandbox, the seam between the
// supervisor and a sandbox backend (docs/adr/0021).
//
// Everything else of a sandbox is shared by every backend (src/supervisor/
// sandbox.cc): the event loop, the runtime channel and its checks
// (RuntimeChannel), the capture pipes and their caps, the timeouts, the
// cgroup's accounting, Classify and the result. A backend launches the
// runtime with its channel on fd 3 (or fd 0, moved to 3 by the launcher),
// its output on fds 1 and 2 and its workspace reachable through an O_PATH fd,
// all of it inside the sandbox's cgroup; the Jail is what is left of it: how
// to learn that the sandbox has ended, interrupt the program, kill and reap.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace kiln::supervisor {

class Jail {
 public:
  virtual ~Jail() = default;
  virtual std::string_view backend() const = 0;  // "native", "gvisor"
  // Readable (POLLIN) once the sandbox has ended (a pidfd).
  virtual int exit_fd() const = 0;
  // Sends `sig` to the program (SIGINT: KeyboardInterrupt); false when it
  // could not be sent.
  virtual bool Signal(int sig) = 0;
  // Kills every process of the sandbox now (idempotent, non-blocking).
  virtual void Kill() = 0;
  // After Kill or the sandbox's end: waits for it and returns its wait
  // status (and the rusage of what was reaped); nullopt when it was not
  // seen to end within a few seconds.
  virtual std::optional<int> Reap(rusage* ru) = 0;
  // The program's own wait status when the backend reports it apart from
  // the sandbox's (gVisor: runsc's exit code); nullopt otherwise.
  virtual std::optional<int> ProgramStatus() const = 0;
  // Why the sandbox ended before its runtime started (the backend's own
  // diagnostics, bounded), for setup_error; empty when it has none.
  virtual std::string StartFailure() const = 0;
};

}  // namespace kiln::supervisor
