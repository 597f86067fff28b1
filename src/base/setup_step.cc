#include "base/setup_step.h"

namespace kiln {

std::string_view ToString(SetupStep step) {
  switch (step) {
    case SetupStep::kNone: return "none";
    case SetupStep::kPlan: return "plan";
    case SetupStep::kCgroupCreate: return "cgroup_create";
    case SetupStep::kClone: return "clone";
    case SetupStep::kUserMaps: return "user_maps";
    case SetupStep::kCgroupAttach: return "cgroup_attach";
    case SetupStep::kStartProgram: return "start_program";
    case SetupStep::kDeathSignal: return "death_signal";
    case SetupStep::kWaitParent: return "wait_parent";
    case SetupStep::kSetIds: return "set_ids";
    case SetupStep::kMountPrivate: return "mount_private";
    case SetupStep::kMountRoot: return "mount_root";
    case SetupStep::kMountBinds: return "mount_binds";
    case SetupStep::kMountProc: return "mount_proc";
    case SetupStep::kMountTmpfs: return "mount_tmpfs";
    case SetupStep::kStageFiles: return "stage_files";
    case SetupStep::kPivotRoot: return "pivot_root";
    case SetupStep::kRemountRootRo: return "remount_root_ro";
    case SetupStep::kHostname: return "hostname";
    case SetupStep::kLoopback: return "loopback";
    case SetupStep::kWorkspaceFd: return "workspace_fd";
    case SetupStep::kDropCaps: return "drop_caps";
    case SetupStep::kRlimits: return "rlimits";
    case SetupStep::kNoNewPrivs: return "no_new_privs";
    case SetupStep::kLandlock: return "landlock";
    case SetupStep::kSeccomp: return "seccomp";
    case SetupStep::kForkWorker: return "fork_worker";
    case SetupStep::kStdio: return "stdio";
    case SetupStep::kCloseFds: return "close_fds";
    case SetupStep::kExec: return "exec";
    case SetupStep::kZygote: return "zygote";
    case SetupStep::kChildUserNs: return "child_user_ns";
    case SetupStep::kChildNamespaces: return "child_namespaces";
    case SetupStep::kWaitAttach: return "wait_attach";
    case SetupStep::kVerify: return "verify";
    case SetupStep::kCount: break;
  }
  return "unknown";
}

}  // namespace kiln
