// Capabilities: the sandbox keeps none. The namespace's full set is needed for
// the mount steps; after them every set is emptied: bounding (so no later exec
// can regain one), ambient, inheritable, permitted, effective.
#pragma once

namespace kiln::isolation {

// Child side. `last_cap` is /proc/sys/kernel/cap_last_cap, read by the
// supervisor before clone. -1 with errno on failure.
int DropAllCapabilitiesInChild(int last_cap);

// Supervisor side: /proc/sys/kernel/cap_last_cap (CAP_LAST_CAP if unreadable).
int ReadLastCap();

}  // namespace kiln::isolation
