// SchedulerLoop's virtual time (--clock=virtual, scheduler/virtual_clock.h): federated clients'
// check-ins and upload reports wait in the virtual clock and reach FedRounds in the order of the
// virtual times they carry; round deadlines fire at their virtual times. Data-centre workers'
// turns (their pulls; their pushes and clock) wait there too and are granted one at a time,
// so the servers see every turn's requests in virtual-time order.
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

void SchedulerLoop::HoldTurn(const Envelope& env, const Member& m) {
  const proto::Header& h = env.message.header;
  Status refused;
  if (!vclock_) {
    refused = Status::FailedPrecondition(
        "this scheduler runs wall time: start it with --clock=virtual for workers that run in "
        "virtual time");
  } else if (!h.has_virtual_time() || !std::isfinite(h.virtual_time())) {
    refused = Status::InvalidArgument("a turn request must carry a finite virtual time");
  } else if (turn_ == m.info.id()) {
    refused =
        Status::FailedPrecondition("this worker's previous turn has not ended (VIRTUAL_DONE) yet");
  }
  if (!refused.ok()) return Reply(env.identity, ErrorReply(h, refused, kSchedulerId));
  const Arrival arrival{m.info.id(), h.request_id(), env.identity};
  vclock_->Hold(proto::VIRTUAL_TURN, arrival, m.info.rank(), h.virtual_time(), {});
  ReleaseVirtual();
}

// The turn in flight settled: what it released (workers whose parked requests it answered) works
// from the turn's time; its worker waits while a server parks its request, else it works until
// the time it declares; a worker's last turn (or the end of its parked last turn, out of turn)
// ends its part.
void SchedulerLoop::EndTurn(const Envelope& env, const Member& m) {
  const proto::Header& h = env.message.header;
  const proto::VirtualTurn& turn = h.virtual_turn();
  const int32_t id = m.info.id();
  const bool in_turn = turn_ == id;
  if (!vclock_ || (!in_turn && !(turn.finished() && !turn.parked()))) {
    return Reply(env.identity,
                 ErrorReply(h, Status::FailedPrecondition("no turn of this worker is in flight"),
                            kSchedulerId));
  }
  if (in_turn) turn_.reset();
  spdlog::debug("worker {}'s turn ended{}{}{}, next at {:.6f}", id, turn.parked() ? " parked" : "",
                turn.finished() ? " (its last)" : "",
                turn.unparked_size() > 0 ? fmt::format(", releasing {}", turn.unparked_size()) : "",
                turn.next());
  for (int32_t released : turn.unparked()) vclock_->Unparked(released);
  if (turn.finished() && !turn.parked()) {
    vclock_->Answered(id, /*finished=*/true);
  } else if (turn.parked()) {
    vclock_->Parked(id);
  } else {
    vclock_->Declare(id, turn.next());
  }
  Reply(env.identity, ReplyTo(h, proto::VIRTUAL_DONE, kSchedulerId));
  ReleaseVirtual();
}

// Hands FedRounds what the clock may release: the earliest held request while it is earlier
// than every working client's bound, or a deadline earlier than both. Stops while a close or
// commit waits for the servers (what comes next must see the model it applied) and when nothing
// may go.
void SchedulerLoop::ReleaseVirtual() {
  if (!vclock_) return;
  const std::vector<int32_t> live = members_.LiveWorkers();
  TakeLateHolders();
  while (!fed_.AwaitingServers() && !turn_) {
    std::optional<double> due = fed_.NextDeadline();
    if (due == stale_deadline_) due.reset();
    // A deadline earlier than the earliest held request fires before it.
    if (std::optional<VirtualClock::Event> e =
            vclock_->Release(live, due.value_or(VirtualClock::kNever))) {
      if (e->type == proto::VIRTUAL_TURN) {
        proto::Header h;
        h.set_type(proto::VIRTUAL_TURN);
        h.set_sender(kSchedulerId);
        h.set_request_id(e->arrival.request_id);
        h.set_virtual_time(e->t);
        vclock_->Answered(e->arrival.worker, /*finished=*/false);
        turn_ = e->arrival.worker;
        spdlog::debug("virtual time {:.6f}: turn of worker {} (rank {})", e->t, e->arrival.worker,
                      e->rank);
        Reply(e->arrival.identity, h);
        continue;
      }
      DispatchRound(e->type, e->arrival, e->request);
      continue;
    }
    if (!due || !vclock_->Fire(*due, live)) break;
    fed_.Tick(LiveWorkers(), vclock_->now());
    // Firing changed nothing (the first round's wait with too few idle clients): it holds
    // nothing back from then on.
    if (fed_.NextDeadline() == due) stale_deadline_ = due;
  }
  TakeLateHolders();
}

// An over-committed secure round being unmasked needs shares of its late holders, whose upload
// reports the clock holds behind the round's close: they are taken now, each at its own time
// (its training time counts to it). What they reveal depends only on which uploads the round
// kept, and the round waits for every live holder under virtual time, so which reports come
// early does not depend on the host.
void SchedulerLoop::TakeLateHolders() {
  std::vector<VirtualClock::Event> late = vclock_->Take([this](const VirtualClock::Event& e) {
    return e.type == proto::ROUND_UPLOADED &&
           fed_.UnmaskHolder(e.arrival.worker, e.request.round());
  });
  for (const VirtualClock::Event& e : late) {
    spdlog::debug(
        "virtual time {:.6f}: worker {}'s late report of round {} taken at {:.6f} for "
        "its shares",
        vclock_->now(), e.arrival.worker, e.request.round(), e.t);
    fed_.Report(e.arrival.worker, e.request);
    fed_.Uploaded(e.arrival, e.request.round(), LiveWorkers(), e.t);
  }
}

std::string SchedulerLoop::VirtualJson() {
  if (!vclock_) return "";
  std::vector<int> waiting_for;
  for (int32_t id : vclock_->Blocking(members_.LiveWorkers())) {
    if (const Member* m = members_.ById(id)) waiting_for.push_back(m->info.rank());
  }
  std::sort(waiting_for.begin(), waiting_for.end());
  const Member* turn = turn_ ? members_.ById(*turn_) : nullptr;
  const nlohmann::json j = {{"now_s", vclock_->now()},
                            {"held", vclock_->held()},
                            {"waiting_for", waiting_for},
                            {"turn", turn ? turn->info.rank() : -1}};
  return j.dump();
}

}  // namespace hetps
