// kiln-sandbox-init: what a pooled sandbox's pid 1 execs once it has forked
// the worker (src/child/zygote_child.cc, step 18), so that pid 1 no longer
// holds a copy of the zygote's memory: `kiln-sandbox-init WORKER_PID`, with
// the setup channel on fd 4 and SIGCHLD blocked. Static, a few pages.
// Restricted dialect (P4), like everything in src/child/.
#include <sys/prctl.h>
#include <unistd.h>

#include "child/child_plan.h"
#include "child/child_steps.h"

int main(int argc, char** argv) {
  // Unreadable and invisible to the program (hidepid=ptraceable), as before
  // the exec, which made us dumpable again.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (argc != 2) ::_exit(126);
  pid_t worker = 0;
  for (const char* p = argv[1]; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') ::_exit(126);
    worker = worker * 10 + (*p - '0');
  }
  kiln::child::SetSyncFd(kiln::child::kSyncFd);
  kiln::child::RunPooledInit(worker);
}
