#include "worker/train/virtual_steps.h"

namespace hetps {

namespace {
constexpr size_t kRequestBytes = 64;  // a request's or an acknowledgement's own bytes
}

VirtualSteps::VirtualSteps(Client& client, const LinkOptions& link, double flops_per_sample,
                           double gflops)
    : client_(client), flops_per_sample_(flops_per_sample), gflops_(gflops) {
  if (link.enabled()) link_.emplace(link);
}

double VirtualSteps::ComputeSeconds(int64_t samples, double slowdown) const {
  return static_cast<double>(samples) * flops_per_sample_ / (gflops_ * 1e9) * slowdown;
}

Status VirtualSteps::Turn(const Requests& requests, double next_after) {
  const ClientStats before = client_.stats();
  if (Status s = client_.BeginTurn(now_); !s.ok()) return s;
  auto tickets = requests();
  if (!tickets.ok()) {
    // The turn must end even so: what was issued is waited for, the error returned.
    (void)client_.EndTurn({}, next_after);
    return tickets.status();
  }
  auto answered = client_.EndTurn(*tickets, next_after);
  if (!answered.ok()) return answered.status();
  now_ = *answered;
  if (link_) {
    const ClientStats after = client_.stats();
    const auto pulled = static_cast<size_t>(after.bytes_pulled - before.bytes_pulled);
    const auto pushed = static_cast<size_t>(after.bytes_pushed - before.bytes_pushed);
    if (pulled > 0) now_ = link_->Down(pulled, link_->Up(kRequestBytes, now_));
    if (pushed > 0) now_ = link_->Down(kRequestBytes, link_->Up(pushed, now_));
  }
  return Status();
}

Status VirtualSteps::Finish() { return client_.FinishTurns(); }

}  // namespace hetps
