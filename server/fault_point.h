// Crash points on a server's durable write path, for tests: a test (or the environment
// variable HETPS_CRASH_AT=point:n, read by hetps-server) installs a hook that is called at each
// point and may stop the process there, which is how the exact-sum tests reach every step of
// the path without relying on timing. Without a hook a point costs one relaxed load.
//
// Points: update.logged (an update is in the log, not yet applied or answered),
// update.answered (its reply is on its way, the update not yet applied), update.replied (its
// reply is on its way, or in the batch of answers it goes back in, and the update applied),
// checkpoint.saved (a partition's state is serialized, not yet written), checkpoint.written
// (written, the log before it dropped).
#pragma once

#include <atomic>
#include <string>

namespace hetps {

using FaultHook = void (*)(const char* point);
extern std::atomic<FaultHook> g_fault_hook;

inline void FaultPoint(const char* point) {
  if (FaultHook hook = g_fault_hook.load(std::memory_order_relaxed)) hook(point);
}

// Installs a hook that SIGKILLs this process at the n-th time (1-based) `point` is reached,
// from a spec "point:n"; false when the spec is malformed.
bool CrashAt(const std::string& spec);

}  // namespace hetps
