// VirtualSteps: a data-centre worker's steps in virtual time (--clock=virtual,
// docs/virtual-time.md). Each step is two turns the scheduler grants one at a time, in
// virtual-time order: the pull, then the pushes and the clock. Between them the worker computes
// its gradient for real, but the step's virtual compute time comes from its device model: batch
// x the model's training FLOPs per sample / the device's sustained GFLOP/s x its slowdown (the
// worker's, times its straggler factor at that clock). A turn acts at the time its requests
// leave; when a link is emulated (hetps/link.h), its transfers' time (the shaper on the virtual
// clock) is added once it is answered. A turn answered late (a server parked the read or the
// clock until slower workers caught up) continues from the time of the turn that released it.
//
// Thread-safety: none; the training thread's.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "hetps/client.h"
#include "hetps/link.h"
#include "worker/edge/virtual_round.h"

namespace hetps {

class VirtualSteps {
 public:
  // gflops > 0.
  VirtualSteps(Client& client, const LinkOptions& link, double flops_per_sample, double gflops);

  // The worker's virtual time (seconds from the run's start).
  double now() const { return now_; }
  // The virtual seconds one step of `samples` takes at `slowdown`.
  double ComputeSeconds(int64_t samples, double slowdown) const;

  // One turn: waits for it to be granted at now(), issues `requests` (the caller's pulls, or
  // its pushes and clock) and waits for their answers; now() moves to the answer (+ the
  // transfers). `next_after`: what the worker does before its next turn takes at least this
  // long (its compute), so the scheduler may grant earlier turns meanwhile.
  using Requests = std::function<StatusOr<std::vector<Ticket>>()>;
  Status Turn(const Requests& requests, double next_after);
  // Time passes without a turn (the step's compute).
  void Advance(double seconds) { now_ += seconds; }
  // This worker takes no more turns.
  Status Finish();

 private:
  Client& client_;
  VirtualRound model_;  // the device (at slowdown 1) and the link, as edge clients model them
  bool link_;           // a link is emulated
  double now_ = 0;
};

}  // namespace hetps
