#include "worker/train/virtual_steps.h"

namespace hetps {

VirtualSteps::VirtualSteps(Client& client, const LinkOptions& link, double flops_per_sample,
                           double gflops)
    : client_(client), model_(link, flops_per_sample, gflops, 1.0), link_(link.enabled()) {}

double VirtualSteps::ComputeSeconds(int64_t samples, double slowdown) const {
  return model_.Compute(0, samples) * slowdown;
}

Status VirtualSteps::Turn(const Requests& requests, double next_after) {
  const ClientStats before = client_.stats();
  if (Status s = client_.BeginTurn(now_); !s.ok()) return s;
  auto tickets = requests();
  if (!tickets.ok()) {
    // The turn ends even so, or the scheduler would wait for it; the error is returned.
    (void)client_.EndTurn({}, next_after);
    return tickets.status();
  }
  auto answered = client_.EndTurn(*tickets, next_after);
  if (!answered.ok()) return answered.status();
  now_ = *answered;
  if (link_) {
    const ClientStats after = client_.stats();
    if (const int64_t pulled = after.bytes_pulled - before.bytes_pulled; pulled > 0) {
      now_ = model_.Download(now_, pulled);
    }
    if (const int64_t pushed = after.bytes_pushed - before.bytes_pushed; pushed > 0) {
      now_ = model_.Upload(now_, pushed);
    }
  }
  return Status();
}

Status VirtualSteps::Finish() { return client_.FinishTurns(); }

}  // namespace hetps
