// The closing restrictions of every sandbox's pid 1, in one function for both
// child paths: RunChild (a cold sandbox, child_main.cc: C16-C20 of
// docs/setup-sequence.md) and RunZygoteChild (a pooled sandbox,
// zygote_child.cc: Z12-Z16), and for a zygote's own pid 1 (C16-C19 in
// zygote mode). Runs in the sandbox's pid 1 (or a zygote's), after the fds are
// arranged and before the worker is forked, so the worker inherits all of it.
// Restricted dialect (P4): no allocation, no locks, no exceptions, no logger;
// a failing step sends SyncMessage{kFailure, step, errno, detail} and _exits
// (P5). Not in child_steps.cc: kiln-sandbox-init links that file without the
// isolation code.
#pragma once

#include <linux/filter.h>

#include <cstddef>

#include "isolation/landlock.h"
#include "isolation/rlimits.h"

namespace kiln::child {

struct ClosingPlan {
  int last_cap = 40;
  // A zygote's pid 1 keeps CAP_SETUID and CAP_SETGID of its own user
  // namespace, ambient (each of its children takes its own uid); every other
  // pid 1 drops every capability.
  bool keep_setid_caps = false;
  const isolation::RlimitPlan* rlimits = nullptr;     // required
  const isolation::LandlockPlan* landlock = nullptr;  // required; ABI 0: none
  // false only for a zygote's pid 1 (its children install the filter after
  // their own setup). Otherwise a missing filter fails the step (EINVAL).
  bool install_seccomp = true;
  const sock_filter* seccomp = nullptr;
  size_t seccomp_length = 0;
};

// In this order, each failure reported with its own SetupStep:
//   kDropCaps     no capability in any set (or only the zygote's two)
//   kRlimits      the per-process limits (detail: the failing rlimit's index)
//   kNoNewPrivs   PR_SET_NO_NEW_PRIVS: no exec can grant privileges again, and
//                 what lets an unprivileged process install Landlock and seccomp
//   kLandlock     writes only beneath the writable mounts; TCP, signals and
//                 abstract sockets scoped where the ABI has them
//   kSeccomp      last, so that its filter need not allow any setup call
// Returns only when every step succeeded.
void ApplyClosingRestrictions(const ClosingPlan& plan);

}  // namespace kiln::child
