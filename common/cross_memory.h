// Cross memory attach: copying between this process and another of the same user on this
// machine with process_vm_readv / process_vm_writev, one copy made by the kernel straight
// between the two address spaces (the single-copy path MPI libraries use on one host). The
// kernel allows it where the caller may ptrace the other process: the same user, and no
// stricter Yama ptrace_scope or seccomp policy. Callers find out with a probe (a read and a
// write of known values) before relying on it.
//
// Thread-safety: free functions without state.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace hetps {

// The inode of this process's pid namespace (0 if /proc does not say): two processes can use
// each other's pids only within one namespace.
uint64_t PidNamespace();

// Copies `bytes` at `address` in process `pid` into `dst`, or `src` to there. A transfer the
// kernel splits is continued; anything short of all the bytes is an error (a gone process:
// UNAVAILABLE; an address range the other process does not map: INVALID_ARGUMENT; no
// permission: PERMISSION_DENIED).
Status ReadProcessMemory(pid_t pid, uint64_t address, void* dst, size_t bytes);
Status WriteProcessMemory(pid_t pid, uint64_t address, const void* src, size_t bytes);

}  // namespace hetps
