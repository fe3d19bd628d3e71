// SchedulerLoop's virtual time (--clock=virtual, scheduler/virtual_clock.h): federated clients'
// check-ins and upload reports wait in the virtual clock and reach FedRounds in the order of the
// virtual times they carry; round deadlines fire at their virtual times.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "scheduler/scheduler_loop.h"

namespace hetps {

void SchedulerLoop::HoldRound(const Arrival& arrival, const Member& m, const proto::Header& h) {
  if (!h.fed_round().has_virtual_time()) {
    return Reply(arrival.identity,
                 ErrorReply(h,
                            Status::InvalidArgument(
                                "this scheduler runs virtual time (--clock=virtual): its clients "
                                "say when each request happens; start them with --clock=virtual"),
                            kSchedulerId));
  }
  if (!std::isfinite(h.fed_round().virtual_time())) {
    return Reply(arrival.identity,
                 ErrorReply(h,
                            Status::InvalidArgument(
                                fmt::format("a round request's virtual time must be finite, not {}",
                                            h.fed_round().virtual_time())),
                            kSchedulerId));
  }
  vclock_->Hold(h.type(), arrival, m.info.rank(), h.fed_round().virtual_time(), h.fed_round());
  ReleaseVirtual();
}

// A client's lookahead: its next request comes no earlier than the time it declares, so what is
// held before that time may go while it trains. Answered at once (also under wall time, where
// it changes nothing).
void SchedulerLoop::DeclareProgress(const Envelope& env, const Member& m) {
  const proto::Header& h = env.message.header;
  Reply(env.identity, ReplyTo(h, proto::ROUND_PROGRESS, kSchedulerId));
  if (!vclock_ || !h.fed_round().has_virtual_time()) return;
  vclock_->Declare(m.info.id(), h.fed_round().virtual_time());
  ReleaseVirtual();
}

// Hands FedRounds what the clock may release: the earliest held request while it is earlier
// than every working client's bound, or a deadline earlier than both. Stops while a close or
// commit waits for the servers (what comes next must see the model it applied) and when nothing
// may go.
void SchedulerLoop::ReleaseVirtual() {
  if (!vclock_) return;
  const std::vector<int32_t> live = members_.LiveWorkers();
  while (!fed_.AwaitingServers()) {
    std::optional<double> due = fed_.NextDeadline();
    if (due == stale_deadline_) due.reset();
    // A deadline earlier than the earliest held request fires before it.
    if (std::optional<VirtualClock::Event> e =
            vclock_->Release(live, due.value_or(VirtualClock::kNever))) {
      DispatchRound(e->type, e->arrival, e->request);
      continue;
    }
    if (!due || !vclock_->Fire(*due, live)) break;
    fed_.Tick(LiveWorkers(), vclock_->now());
    // Firing changed nothing (the first round's wait with too few idle clients): it holds
    // nothing back from then on.
    if (fed_.NextDeadline() == due) stale_deadline_ = due;
  }
}

std::string SchedulerLoop::WithVirtualClock(std::string summary) {
  if (!vclock_ || summary.empty()) return summary;
  nlohmann::json j = nlohmann::json::parse(summary, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return summary;
  std::vector<int> waiting_for;
  for (int32_t id : vclock_->Blocking(members_.LiveWorkers())) {
    if (const Member* m = members_.ById(id)) waiting_for.push_back(m->info.rank());
  }
  std::sort(waiting_for.begin(), waiting_for.end());
  j["virtual"] = {
      {"now_s", vclock_->now()}, {"held", vclock_->held()}, {"waiting_for", waiting_for}};
  return j.dump();
}

}  // namespace hetps
