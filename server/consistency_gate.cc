#include "server/consistency_gate.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "server/aggregation/aggregator.h"

namespace hetps {

ConsistencyGate::ConsistencyGate(AlgorithmSpec consistency, AlgorithmSpec aggregator,
                                 Actions actions)
    : consistency_(std::move(consistency)),
      aggregator_(std::move(aggregator)),
      actions_(std::move(actions)) {}

void ConsistencyGate::Start(const std::vector<int32_t>& workers, int64_t start_clock) {
  controller_ = MakeController(consistency_, workers);
  if (start_clock <= 0) return;
  ClockTable clocks(workers);
  for (int32_t w : workers) clocks.Advance(w, start_clock - 1);
  controller_->AdoptClocks(clocks);
}

int64_t ConsistencyGate::MinClock(int64_t fallback) const {
  const int64_t slowest = controller_->clocks().min();
  return slowest == kUnbounded ? fallback : slowest;
}

void ConsistencyGate::See(const proto::Header& h) {
  if (!h.has_virtual_time() || !std::isfinite(h.virtual_time())) return;
  virtual_ = true;
  virtual_now_ = std::max(virtual_now_, h.virtual_time());
  controller_->Tick(virtual_now_);
  CompleteRounds();
}

void ConsistencyGate::Observe(const proto::Header& h) {
  released_.clear();
  See(h);
  if (controller_->Observe(h.sender(), h.clock())) {
    CompleteRounds();
    Release();
  }
}

void ConsistencyGate::Admit(Envelope& env) {
  const proto::Header& h = env.message.header;
  released_.clear();
  See(h);
  if (controller_->Observe(h.sender(), h.clock())) {  // a restarted server catching up
    CompleteRounds();
    Release();
  }
  if (h.type() == proto::PULL && !controller_->ReadReady(h.sender(), h.clock())) {
    if (ParkedFull(env)) return;
    if (h.has_virtual_time()) NoticeParked(env.identity, h);
    Park(parked_reads_, env);  // answered by Release() once the slowest catch up
    return;
  }
  if (h.type() == proto::PUSH && !controller_->Accepts(h.clock())) {
    ++dropped_;  // its round closed without it
    proto::Header r = ReplyTo(h, proto::PUSH_REPLY, -1);
    r.set_dropped(true);
    actions_.reply(env.identity, r);
    return;
  }
  Serve(env);
}

void ConsistencyGate::Serve(Envelope& env) {
  DataRequest request;
  request.identity = std::move(env.identity);
  request.message = std::move(env.message);
  const proto::Header& h = request.message.header;
  if (h.type() == proto::PUSH) {
    request.hold = controller_->synchronous();
    request.window = controller_->window();
  }
  request.min_clock = MinClock(h.clock());
  actions_.serve(std::move(request));
}

void ConsistencyGate::OnClock(Envelope& env) {
  const proto::Header& h = env.message.header;
  if (ParkedFull(env)) return;  // before the controller counts it
  See(h);
  controller_->Observe(h.sender(), h.clock());
  controller_->OnClock(h.sender(), h.clock(), Now());
  CompleteRounds();
  if (!h.has_virtual_time()) {
    Park(parked_clocks_, env);  // the reply waits for the gate
    return Release();
  }
  // Virtual: the turn ends with this reply (a grant or PARKED), naming whom the clock released.
  const std::string identity = env.identity;
  const proto::Header request = h;
  Park(parked_clocks_, env);
  released_.clear();
  Release(&request);
  std::erase(released_, request.sender());
  if (!kept_) return NoticeParked(identity, request);
  for (int32_t w : released_) kept_->mutable_virtual_turn()->add_unparked(w);
  actions_.reply(identity, *kept_);
  kept_.reset();
}

void ConsistencyGate::NoticeParked(const std::string& identity, const proto::Header& request) {
  proto::Header r = ReplyTo(request, proto::PARKED, -1);
  for (int32_t w : released_) {
    if (w != request.sender()) r.mutable_virtual_turn()->add_unparked(w);
  }
  released_.clear();
  actions_.reply(identity, r);
}

bool ConsistencyGate::ParkedFull(const Envelope& env) {
  const proto::Header& h = env.message.header;
  auto it = parked_by_.find(h.sender());
  if (it == parked_by_.end() || it->second < parked_limit_) return false;
  actions_.reply(env.identity,
                 ErrorReply(h,
                            Status::Unavailable(fmt::format(
                                "worker {} has {} requests waiting at this server; it takes no "
                                "more until they are answered",
                                h.sender(), it->second)),
                            -1));
  return true;
}

void ConsistencyGate::Park(std::deque<Envelope>& queue, Envelope& env) {
  ++parked_by_[env.message.header.sender()];
  queue.push_back(std::move(env));
}

void ConsistencyGate::Unparked(int32_t worker) {
  auto it = parked_by_.find(worker);
  if (it != parked_by_.end() && --it->second <= 0) parked_by_.erase(it);
}

void ConsistencyGate::Tick() {
  if (!controller_ || virtual_) return;  // virtual deadlines fire as requests arrive (See)
  controller_->Tick(actions_.now());
  CompleteRounds();
  Release();
}

void ConsistencyGate::Release(const proto::Header* keep) {
  const double now = Now();
  for (auto it = parked_clocks_.begin(); it != parked_clocks_.end();) {
    proto::Header& h = it->message.header;
    if (!controller_->TryStart(h.sender(), h.clock() + 1, now)) {
      ++it;
      continue;
    }
    if (h.has_virtual_time()) h.set_virtual_time(virtual_now_);  // answered now
    proto::Header r = ReplyTo(h, proto::CLOCK_REPLY, -1);
    r.set_clock(controller_->ContinueAt(h.sender(), h.clock()));
    r.set_min_clock(MinClock(h.clock() + 1));
    if (keep != nullptr && h.sender() == keep->sender() && h.request_id() == keep->request_id()) {
      kept_ = std::move(r);
    } else {
      if (virtual_) released_.push_back(h.sender());
      actions_.reply(it->identity, r);
    }
    Unparked(h.sender());
    it = parked_clocks_.erase(it);
  }
  for (auto it = parked_reads_.begin(); it != parked_reads_.end();) {
    proto::Header& h = it->message.header;
    if (!controller_->ReadReady(h.sender(), h.clock())) {
      ++it;
      continue;
    }
    const int32_t worker = h.sender();
    if (h.has_virtual_time()) h.set_virtual_time(virtual_now_);
    if (virtual_) released_.push_back(worker);
    Serve(*it);
    Unparked(worker);
    it = parked_reads_.erase(it);
  }
}

void ConsistencyGate::CompleteRounds() {
  for (const RoundSpec& round : controller_->TakeRounds()) actions_.apply_round(round);
}

void ConsistencyGate::RemoveWorker(int32_t w, const char* why) {
  if (!controller_) return;
  controller_->RemoveWorker(w);
  spdlog::info("worker {} {}; it no longer holds back any clock", w, why);
  CompleteRounds();
  Release();
}

int64_t ConsistencyGate::AddWorker(int32_t w) {
  if (controller_->clocks().contains(w)) return controller_->clocks().clock(w);  // a repeat
  const int64_t clock = controller_->AddWorker(w);
  spdlog::info("worker {} joined at clock {} ({} workers count now)", w, clock,
               controller_->clocks().all().size());
  CompleteRounds();
  Release();
  return clock;
}

void ConsistencyGate::OnHint(const std::vector<int32_t>& stragglers, int64_t quorum) {
  // Under virtual time the hints (from the workers' iteration times on the host) would make a
  // run depend on the host: backups=auto and quorum=auto keep their defaults.
  if (!controller_ || virtual_) return;
  controller_->OnHint(stragglers, quorum);
  CompleteRounds();
  Release();
}

void ConsistencyGate::OnRoundClosed(int64_t round, const std::vector<int32_t>& kept,
                                    const std::vector<int64_t>& tasks,
                                    const std::vector<RoundSpec::Late>& late, int64_t late_rounds,
                                    std::shared_ptr<const proto::SecureClose> secure,
                                    double noise_std) {
  if (!controller_) return;
  const bool cohorts = consistency_.name() == "committed" && aggregator_.name() == "fedbuff";
  if (secure && aggregator_.name() != "fedavg" && !cohorts) {
    spdlog::error(
        "secure round {} dropped: the servers learn only the sum of its uploads, which only "
        "--aggregator=fedavg (rounds) and fedbuff (cohorts) can use (this server runs {})",
        round, aggregator_.ToString());
    controller_->OnRoundClosed(round, {}, tasks, {}, late_rounds);
  } else {
    controller_->OnRoundClosed(round, kept, tasks, late, late_rounds, std::move(secure), noise_std);
  }
  CompleteRounds();
  Release();
}

Status ConsistencyGate::Switch(const std::string& text) {
  auto spec = Controllers().Parse(text);
  if (!spec.ok()) return spec.status();
  if (Status s = CheckCombination(aggregator_, *spec); !s.ok()) return s;
  const ApplySchedule now = Controllers().EntryFor(consistency_.name()).schedule;
  const ApplySchedule to = Controllers().EntryFor(spec->name()).schedule;
  if ((SchedulerRunsRounds(now) || SchedulerRunsRounds(to)) && now != to) {
    return Status::InvalidArgument(fmt::format(
        "{} -> {}: a live switch cannot move into, out of or between the modes whose rounds the "
        "scheduler runs (the clients' loop and the scheduler's differ); restart the run instead",
        consistency_.Full(), spec->Full()));
  }
  if (!controller_) return Status::Unavailable("the cluster has not formed yet");
  std::vector<int32_t> workers;
  for (const auto& [w, c] : controller_->clocks().all()) workers.push_back(w);
  std::unique_ptr<ConsistencyController> next = MakeController(*spec, workers);
  next->AdoptClocks(controller_->clocks());
  if (controller_->synchronous() || controller_->window() > 0) {
    actions_.apply_round(RoundSpec::Flush());  // nothing held is lost: apply it all now
  }
  spdlog::info("consistency {} -> {} at clocks {}..{}", consistency_.Full(), spec->Full(),
               controller_->clocks().min(), controller_->clocks().max());
  controller_ = std::move(next);
  consistency_ = std::move(*spec);
  Release();
  return Status();
}

}  // namespace hetps
