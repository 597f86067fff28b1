// Capabilities: the sandbox keeps none. The namespace's full set is needed for
// the mount steps; after them every set is emptied: bounding (so no later exec
// can regain one), ambient, inheritable, permitted, effective.
#pragma once

namespace kiln::isolation {

// Child side. `last_cap` is /proc/sys/kernel/cap_last_cap, read by the
// supervisor before clone. -1 with errno on failure.
int DropAllCapabilitiesInChild(int last_cap);

// Child side, for a zygote (src/zygote): every capability goes but CAP_SETUID
// and CAP_SETGID, which stay in the bounding, permitted, effective,
// inheritable and ambient sets, so that they survive the execve of the
// zygote's interpreter (a non-root uid keeps only ambient capabilities across
// exec). They are the zygote's user namespace's, and let it give each child
// its own uid. -1 with errno on failure.
int KeepOnlySetIdCapsInChild(int last_cap);

// Supervisor side: /proc/sys/kernel/cap_last_cap (CAP_LAST_CAP if unreadable).
int ReadLastCap();

}  // namespace kiln::isolation
