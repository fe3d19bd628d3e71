// FedRounds' synchronous rounds: opening a round once enough clients are idle (the selection
// policy picks them), taking uploads in time or late (--late_rounds), and closing the round at
// its K-th upload, when every selected client uploaded or died, or at its deadline.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "scheduler/fed_rounds.h"

namespace hetps {

void FedRounds::MaybeOpen(int live_workers, double now) {
  if (state_ != State::kWaiting || idle_.empty() || finished()) return;
  const int live_clients = Clients(live_workers);
  const int want =
      options_.clients_per_round > 0
          ? static_cast<int>(std::ceil(options_.clients_per_round * options_.overcommit - 1e-9))
          : live_clients;
  // Enough idle clients, or every live one is idle (fewer are alive than the round wants). The
  // first round waits for every client that joined, so that its draw, like every later one,
  // depends on the seed and not on which processes happened to start first.
  const int idle = static_cast<int>(idle_.size());
  if (idle < std::min(want, live_clients) ||
      (round_ == 0 && idle < live_clients && !WaitedLongEnough(now))) {
    return;
  }
  std::vector<const ClientRecord*> candidates;
  for (const auto& [id, a] : idle_) candidates.push_back(&clients_[id]);
  SortByRank(candidates);
  const int count = std::min<int>(want, static_cast<int>(candidates.size()));
  if (count <= 0) return;
  const std::vector<int32_t> picked =
      policy_->Select(candidates, count, round_, options_.rounds, rng_);
  state_ = State::kOpen;
  opened_at_ = now;
  log_.Start(now);
  selected_.clear();
  uploads_.clear();
  keep_ = options_.clients_per_round > 0 ? std::min(options_.clients_per_round, count) : count;
  proto::FedRound task;
  task.set_round(round_);
  ClipTask(task);
  if (secure_options_.on) {
    secure_ = std::make_unique<SecureCohort>();
    secure_->protocol =
        std::make_unique<SecureRound>(round_, picked, secure_options_, options_.seed, keep_);
    *task.mutable_secagg() = secure_->protocol->Task();
    secure_->phase_at = now;
  }
  for (int32_t id : picked) {
    auto it = idle_.find(id);
    if (it == idle_.end() || selected_.contains(id)) continue;  // a policy's mistake
    selected_.insert(id);
    Assign(it, round_, task, now);
  }
  selected_all_.assign(selected_.begin(), selected_.end());
  // Central DP's sampling rate: selected / live clients for a uniform draw; a policy that picks
  // by the clients' history (FedLesScan) gives no amplification: q = 1.
  round_selected_ = static_cast<int>(selected_.size());
  const bool uniform = options_.selection.substr(0, options_.selection.find(':')) == "random";
  round_population_ = uniform ? live_clients : round_selected_;
  std::stable_sort(selected_all_.begin(), selected_all_.end(),  // the misses in rank order
                   [&](int32_t a, int32_t b) { return clients_[a].rank < clients_[b].rank; });
  if (round_ == 0 && options_.deadline_s <= 0) {
    spdlog::warn(
        "rounds have no deadline (--round_deadline_ms): a selected client that fails or goes "
        "offline without dying holds its round up unless the first K arrive without it");
  }
  spdlog::info("round {} opened: {} clients selected of {} idle, keeps the first {}", round_,
               selected_.size(), candidates.size(), keep_);
}

// Idle client `it` is given `task` (of round or task `round`): counted as selected for it.
void FedRounds::Assign(std::map<int32_t, Arrival>::iterator it, int64_t round,
                       const proto::FedRound& task, double now) {
  ClientRecord& c = clients_[it->first];
  ++c.selected;
  c.last_round = round;
  c.selected_at = now;
  AnswerCheckin(it->second, task);
  idle_.erase(it);
}

void FedRounds::UploadedSync(const Arrival& a, int64_t round, bool in_time, ClientRecord& c) {
  proto::FedRound answer;
  answer.set_round(round);
  // Late: its round closed without it; the next close takes it if it is late by at most
  // late_rounds (the servers keep it that long).
  const int64_t next_close = state_ == State::kClosing ? round_ + 1 : round_;
  const bool closed = round < round_ || (round == round_ && state_ == State::kClosing);
  const bool late = !in_time && options_.late_rounds > 0 && closed && c.last_round == round &&
                    next_close - round <= options_.late_rounds &&
                    (options_.rounds == 0 || next_close < options_.rounds) &&
                    std::none_of(late_.begin(), late_.end(), [&](const proto::LateUpload& l) {
                      return l.worker() == a.worker && l.round() == round;
                    });
  if (secure_ && state_ == State::kClosing && round == round_ &&
      secure_->protocol->phase() == SecureRound::Phase::kUnmask &&
      secure_->protocol->Masking(a.worker)) {
    answer.set_kept(false);  // late, but still a holder of its neighbours' shares
    *answer.mutable_secagg() = secure_->protocol->UnmaskRequest(a.worker);
    return AnswerUpload(a, answer);
  }
  if (secure_ && state_ == State::kOpen && round == round_) {
    if (in_time) {  // answered when the round closes, with what to reveal
      uploads_.push_back(a.worker);
      ++c.kept;
      c.consecutive_missed = 0;
      secure_->uploads[a.worker] = a;
      return;
    }
    selected_.erase(a.worker);  // reported without a masked upload: the round waits no more
  }
  if (in_time || late) {
    if (in_time) {
      uploads_.push_back(a.worker);
    } else {
      proto::LateUpload& l = late_.emplace_back();
      l.set_worker(a.worker);
      l.set_round(round);
    }
    ++c.kept;
    c.consecutive_missed = 0;
  }
  if (late)
    spdlog::info("worker {}'s upload of round {} is late; round {} takes it", a.worker, round,
                 next_close);
  answer.set_kept(in_time || late);
  AnswerUpload(a, answer);
}

void FedRounds::MaybeClose(int live_workers, double now) {
  if (state_ != State::kOpen) return;
  bool everyone = true;  // every selected client still alive uploaded
  for (int32_t id : selected_) {
    if (std::find(uploads_.begin(), uploads_.end(), id) == uploads_.end()) everyone = false;
  }
  const bool late = options_.deadline_s > 0 && now >= opened_at_ + options_.deadline_s;
  const bool failed =  // the secure round cannot go on
      secure_ && secure_->protocol->phase() == SecureRound::Phase::kDone;
  if (static_cast<int>(uploads_.size()) >= keep_ || everyone || late || failed) {
    Close(live_workers, now);
  }
}

void FedRounds::Close(int live_workers, double now) {
  int missed = 0;
  for (int32_t id : selected_all_) {  // also those that died since
    if (std::find(uploads_.begin(), uploads_.end(), id) != uploads_.end()) continue;
    ClientRecord& c = clients_[id];
    ++c.missed;
    ++c.consecutive_missed;
    c.last_missed = round_;
    c.missed_rounds.push_back(round_);
    if (c.missed_rounds.size() > ClientRecord::kHistory) {
      c.missed_rounds.erase(c.missed_rounds.begin());
    }
    ++missed;
    Dropped(id);
  }
  proto::FedRound close;
  close.set_round(round_);
  for (int32_t id : uploads_) close.add_workers(id);
  close.set_late_rounds(options_.late_rounds);
  closing_late_.clear();
  for (proto::LateUpload& l : std::exchange(late_, {})) {
    if (round_ - l.round() > options_.late_rounds) continue;  // the servers dropped it
    l.set_factor(static_cast<double>(l.round() + 1) / static_cast<double>(round_ + 1));
    *close.add_late() = l;
    closing_late_.push_back(std::move(l));
  }
  spdlog::info(
      "round {} closes with {} uploads{} ({} selected clients missed it)", round_, uploads_.size(),
      closing_late_.empty() ? "" : fmt::format(" and {} late ones", closing_late_.size()), missed);
  StepClip(close);
  state_ = State::kClosing;
  closing_ = close;
  if (secure_) return CloseSecure(live_workers, now);
  SendClose(live_workers, now);
}

void FedRounds::SendClose(int live_workers, double now) {
  const std::vector<int32_t> servers = actions_.live_servers();
  closing_servers_ = {servers.begin(), servers.end()};
  actions_.close(closing_);
  if (closing_servers_.empty()) OnClosed(-1, round_, live_workers, now);
}

}  // namespace hetps
