// Reading the setup channel (docs/protocol.md section 1): one fixed-size
// SyncMessage per record, with an fd (SCM_RIGHTS) or the sender's pid
// (SCM_CREDENTIALS, with SO_PASSCRED on our end) attached. Used by the
// supervisor (sandbox.cc) and the warm pool (src/zygote/pool.cc).
#pragma once

#include <sys/types.h>

#include "base/unique_fd.h"
#include "child/sync_message.h"

namespace kiln::supervisor {

struct Received {
  child::SyncMessage msg{};
  UniqueFd fd;       // SCM_RIGHTS, if any
  pid_t sender = 0;  // SCM_CREDENTIALS, if any
  bool eof = false;
  bool again = false;  // nothing to read now
  bool garbage = false;
};

// One record from the setup channel, without blocking. Anything that is not
// exactly one SyncMessage is garbage: the sandbox is hostile (P19).
Received ReceiveSync(int fd);

}  // namespace kiln::supervisor
