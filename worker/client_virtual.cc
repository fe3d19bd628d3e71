// Client's virtual time (docs/virtual-time.md): federated clients' declarations, and the turns
// of data-centre workers, which the scheduler grants one at a time in virtual-time order.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>

#include "hetps/client.h"
#include "worker/client_impl.h"
#include "worker/client_io.h"

namespace hetps {
namespace {

// Sends `h` to the scheduler and checks that it answered with `answer` (`what`: the request,
// for the error).
StatusOr<proto::Header> CallFor(ClientIo& io, proto::Header h, proto::MsgType answer,
                                const char* what) {
  auto r = io.Call(std::move(h));
  if (r.ok() && r->type() != answer) {
    return Status::Malformed(
        fmt::format("the scheduler answered {} with {}", what, proto::MsgType_Name(r->type())));
  }
  return r;
}

}  // namespace

double Client::virtual_time() const { return impl_->virtual_time; }

void Client::SetVirtualTime(double t) { impl_->virtual_time = t; }

Status Client::DeclareVirtualTime(double not_before) {
  if (!impl_->virtual_clock) return Status();
  if (Status s = impl_->Open(); !s.ok()) return s;
  proto::Header h;
  h.set_type(proto::ROUND_PROGRESS);
  h.mutable_fed_round()->set_virtual_time(not_before);
  return CallFor(impl_->io, std::move(h), proto::ROUND_PROGRESS, "a virtual-time declaration")
      .status();
}

Status Client::BeginTurn(double t) {
  if (!impl_->virtual_clock) {
    return Status::FailedPrecondition("turns are for clients in virtual time (virtual_clock)");
  }
  if (Status s = impl_->Open(); !s.ok()) return s;
  if (!std::isfinite(t)) {
    return Status::InvalidArgument(fmt::format("a turn's virtual time must be finite, not {}", t));
  }
  proto::Header h;
  h.set_type(proto::VIRTUAL_TURN);
  h.set_virtual_time(t);
  auto r = CallFor(impl_->io, std::move(h), proto::VIRTUAL_TURN, "a turn request");
  if (!r.ok()) return r.status();
  if (r->virtual_time() != t) {
    return Status::Malformed(
        fmt::format("the scheduler granted a turn at {} for {}", r->virtual_time(), t));
  }
  impl_->virtual_time = t;
  impl_->io.SetTurnTime(t);
  return Status();
}

namespace {

// What a turn's tickets say once each is answered or parked.
struct Settled {
  bool parked = false;
  double answered = -std::numeric_limits<double>::infinity();
  std::vector<int32_t> unparked;
};

Settled Settle(const std::vector<Ticket::State*>& ops) {
  Settled out;
  for (Ticket::State* op : ops) {
    std::unique_lock<std::mutex> lock(op->mu);
    op->cv.wait(lock, [&] { return op->remaining <= 0 || op->remaining == op->parked; });
    if (op->remaining > 0) out.parked = true;
    out.answered = std::max(out.answered, op->virtual_time);
    out.unparked.insert(out.unparked.end(), op->unparked.begin(), op->unparked.end());
  }
  return out;
}

}  // namespace

StatusOr<double> Client::EndTurn(const std::vector<Ticket>& tickets, double next_after) {
  const double t = impl_->virtual_time;
  std::vector<Ticket::State*> ops;
  for (const Ticket& k : tickets) {
    if (k.state_) ops.push_back(k.state_.get());
  }
  const Settled settled = Settle(ops);
  impl_->io.SetTurnTime(std::numeric_limits<double>::quiet_NaN());
  double answered = std::max(t, settled.answered);
  proto::Header h;
  h.set_type(proto::VIRTUAL_DONE);
  proto::VirtualTurn* turn = h.mutable_virtual_turn();
  turn->set_parked(settled.parked);
  for (int32_t w : settled.unparked) turn->add_unparked(w);
  turn->set_next(answered + next_after);
  auto r = CallFor(impl_->io, std::move(h), proto::VIRTUAL_DONE, "the end of a turn");
  // A turn the scheduler did not take leaves what a server parked parked: nothing would release
  // it, so the error goes back at once.
  if (!r.ok() && settled.parked) return r.status();
  Status first = r.status();
  for (const Ticket& k : tickets) {
    if (Status s = k.Wait(); !s.ok() && first.ok()) first = s;
  }
  if (!first.ok()) return first;
  if (settled.parked) {  // answered since: at the time of the turn that released it
    for (Ticket::State* op : ops) {
      std::lock_guard<std::mutex> lock(op->mu);
      answered = std::max(answered, op->virtual_time);
    }
    if (Status s = DeclareVirtualTime(answered + next_after); !s.ok()) return s;
  }
  impl_->virtual_time = answered;
  return answered;
}

Status Client::FinishTurns() {
  if (!impl_->virtual_clock) return Status();
  if (Status s = impl_->Open(); !s.ok()) return s;
  proto::Header h;
  h.set_type(proto::VIRTUAL_DONE);
  h.mutable_virtual_turn()->set_finished(true);
  return CallFor(impl_->io, std::move(h), proto::VIRTUAL_DONE, "a worker's last turn").status();
}

}  // namespace hetps
