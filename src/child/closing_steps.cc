// Restricted dialect (P4): see closing_steps.h.
#include "child/closing_steps.h"

#include <sys/prctl.h>

#include <cerrno>

#include "child/child_steps.h"
#include "isolation/caps.h"
#include "isolation/seccomp.h"

namespace kiln::child {

void ApplyClosingRestrictions(const ClosingPlan& plan) {
  // No capability survives, in any set, for us or anything we exec (a
  // zygote's pid 1: only CAP_SETUID/CAP_SETGID of its user namespace).
  if (plan.keep_setid_caps) {
    KILN_CHILD_STEP(SetupStep::kDropCaps, isolation::KeepOnlySetIdCapsInChild(plan.last_cap));
  } else {
    KILN_CHILD_STEP(SetupStep::kDropCaps, isolation::DropAllCapabilitiesInChild(plan.last_cap));
  }
  // Per-process limits (and the rlimit fallback when there is no cgroup).
  int failed_rlimit = -1;
  if (isolation::ApplyRlimitsInChild(*plan.rlimits, &failed_rlimit) != 0) {
    Fail(SetupStep::kRlimits, errno, failed_rlimit);
  }
  // No exec can grant privileges again (setuid bits, file caps); also what
  // lets an unprivileged process install Landlock and seccomp.
  KILN_CHILD_STEP(SetupStep::kNoNewPrivs, ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
  // Landlock: writes only beneath the writable mounts; TCP and, on ABI >= 6,
  // signals and abstract sockets scoped to this sandbox's own domain.
  if (plan.landlock->abi > 0) {
    KILN_CHILD_STEP(SetupStep::kLandlock, isolation::ApplyLandlockInChild(*plan.landlock));
  }
  // seccomp last, so its filter need not allow any setup call.
  if (plan.install_seccomp) {
    KILN_CHILD_STEP(SetupStep::kSeccomp,
                    isolation::ApplySeccompInChild(plan.seccomp, plan.seccomp_length));
  }
}

}  // namespace kiln::child
