// What hetps-bench pushpull compares hetps with, measured in the same run: plain ZeroMQ
// request/answer loops over TCP loopback (the floor of any transfer through sockets), one
// thread's memcpy (the ceiling of a transfer that copies), and the timed slices in which the
// cluster's clients are measured, with the CPU time every process involved spent.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "common/status.h"

namespace hetps {
class Optimizer;
}

namespace hetps::bench {

constexpr int kRounds = 5;  // slices of each kind, alternating; figures are their medians

// One timed slice: its rate and the CPU time it took per GB moved, on every process involved.
struct Slice {
  double gbps = -1;  // < 0: a request failed
  double cpu_s_per_gb = 0;
};

// What a raw loop moves and does besides moving it.
struct RawLoop {
  // false: `bytes` out, one byte back (as a push); true: one byte out, `bytes` back (a pull).
  bool pull = false;
  // The work hetps must do on top of the transfer, done here by the same code: after a push is
  // acknowledged, the receiver applies `optimizer` to values of its own (as a server does); a
  // pulled reply is copied into the caller's array (as a client does). Null: no work.
  const Optimizer* optimizer = nullptr;
  bool work() const { return optimizer != nullptr; }
};

// CPU seconds (user and system, every thread) used so far by this process and by `others`
// (the cluster's processes; one that is gone counts nothing).
double CpuSeconds(const std::vector<pid_t>& others);

// GB/s (1e9 bytes per second) of a plain DEALER->ROUTER request/answer loop over TCP loopback:
// one side sends `bytes`, handed over zero-copy and taken as ZeroMQ gives them, the other one
// byte. The two ends each have their own context (own I/O thread), as a worker and a server
// process do; both are in this process, so its CPU time is the loop's.
Slice RawZmqGbps(size_t bytes, double seconds, const RawLoop& loop = {});

// Steps per second of a plain DEALER->ROUTER loop moving what one step over many small
// tensors moves: `messages` requests of `bytes` each answered with one byte (the pushes), then
// `messages` one-byte requests each answered with `bytes` (the pulls), each phase all in flight.
double RawZmqSteps(int messages, size_t bytes, double seconds);

// GB/s summed over all workers, each looping `op(worker)` (one tensor-sized transfer). Each
// worker does one untimed operation first (connection set-up, first-touch of buffers); the
// timed window opens once every worker has done it and closes when the last one stops. The CPU
// time is this process's and `cluster`'s over the window.
Slice Measure(const std::vector<pid_t>& cluster, int workers, size_t bytes, double seconds,
              const std::function<Status(int)>& op);

// GB/s of one thread's memcpy between two buffers of `bytes` (touched first), the median of
// kRounds: the ceiling of any transfer that copies the payload once.
double MemcpyGbps(size_t bytes);

}  // namespace hetps::bench
