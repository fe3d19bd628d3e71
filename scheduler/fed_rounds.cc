#include "scheduler/fed_rounds.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace hetps {

Status ValidateFedRoundsOptions(const FedRoundsOptions& o) {
  if (o.clients_per_round < 0 || o.rounds < 0 || !(o.deadline_s >= 0)) {
    return Status::InvalidArgument("clients_per_round, rounds and round_deadline_ms must be >= 0");
  }
  if (!(o.overcommit >= 1.0)) return Status::InvalidArgument("overcommit must be >= 1");
  if (auto spec = Selections().Parse(o.selection); !spec.ok()) {
    return Status::InvalidArgument("--selection: " + spec.status().message());
  }
  return Status();
}

FedRounds::FedRounds(const FedRoundsOptions& options, Actions actions)
    : options_(options), actions_(std::move(actions)), rng_(options.seed) {
  auto policy = MakeSelection(options_.selection);
  if (!policy.ok()) policy = MakeSelection("random");  // validated before; never reached
  policy_ = std::move(*policy);
}

FedRounds::~FedRounds() {
  if (csv_ != nullptr) std::fclose(csv_);
}

void FedRounds::CheckIn(Arrival a, int live_workers, double now) {
  ClientRecord& c = clients_[a.worker];
  c.id = a.worker;
  c.rank = actions_.rank_of ? actions_.rank_of(a.worker) : 0;
  if (finished()) {
    proto::FedRound done;
    done.set_finished(true);
    done.set_round(round_);
    return actions_.answer_checkin(a, done);
  }
  idle_[a.worker] = std::move(a);
  MaybeOpen(live_workers, now);
}

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
  if (idle < std::min(want, live_clients) || (round_ == 0 && idle < live_clients)) return;
  std::vector<const ClientRecord*> candidates;
  for (const auto& [id, a] : idle_) candidates.push_back(&clients_[id]);
  const int count = std::min<int>(want, static_cast<int>(candidates.size()));
  if (count <= 0) return;
  const std::vector<int32_t> picked =
      policy_->Select(candidates, count, round_, options_.rounds, rng_);
  state_ = State::kOpen;
  opened_at_ = now;
  selected_.clear();
  uploads_.clear();
  keep_ = options_.clients_per_round > 0 ? std::min(options_.clients_per_round, count) : count;
  proto::FedRound task;
  task.set_round(round_);
  for (int32_t id : picked) {
    auto it = idle_.find(id);
    if (it == idle_.end() || selected_.contains(id)) continue;  // a policy's mistake
    selected_.insert(id);
    ClientRecord& c = clients_[id];
    ++c.selected;
    c.last_round = round_;
    c.selected_at = now;
    actions_.answer_checkin(it->second, task);
    idle_.erase(it);
  }
  selected_all_.assign(selected_.begin(), selected_.end());
  if (round_ == 0 && options_.deadline_s <= 0) {
    spdlog::warn(
        "rounds have no deadline (--round_deadline_ms): a selected client that fails or goes "
        "offline without dying holds its round up unless the first K arrive without it");
  }
  spdlog::info("round {} opened: {} clients selected of {} idle, keeps the first {}", round_,
               selected_.size(), candidates.size(), keep_);
}

void FedRounds::Uploaded(Arrival a, int64_t round, int live_workers, double now) {
  proto::FedRound answer;
  answer.set_round(round);
  const bool in_time = state_ == State::kOpen && round == round_ && selected_.contains(a.worker) &&
                       static_cast<int>(uploads_.size()) < keep_ &&
                       std::find(uploads_.begin(), uploads_.end(), a.worker) == uploads_.end();
  ClientRecord& c = clients_[a.worker];
  if (c.last_round == round) {  // its training time, also when it came too late
    c.train_s.push_back(now - c.selected_at);
    if (c.train_s.size() > ClientRecord::kHistory) c.train_s.erase(c.train_s.begin());
  }
  if (in_time) {
    uploads_.push_back(a.worker);
    ++c.kept;
    c.consecutive_missed = 0;
  }
  answer.set_kept(in_time);
  actions_.answer_upload(a, answer);
  MaybeClose(live_workers, now);
  MaybeOpen(live_workers, now);
}

void FedRounds::MaybeClose(int live_workers, double now) {
  if (state_ != State::kOpen) return;
  bool everyone = true;  // every selected client still alive uploaded
  for (int32_t id : selected_) {
    if (std::find(uploads_.begin(), uploads_.end(), id) == uploads_.end()) everyone = false;
  }
  const bool late = options_.deadline_s > 0 && now - opened_at_ >= options_.deadline_s;
  if (static_cast<int>(uploads_.size()) >= keep_ || everyone || late) Close(live_workers, now);
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
  }
  proto::FedRound close;
  close.set_round(round_);
  for (int32_t id : uploads_) close.add_workers(id);
  std::vector<int> kept_ranks, selected_ranks;
  for (int32_t id : uploads_) kept_ranks.push_back(clients_[id].rank);
  for (int32_t id : selected_all_) selected_ranks.push_back(clients_[id].rank);
  spdlog::info("round {} closes with {} uploads ({} selected clients missed it)", round_,
               uploads_.size(), missed);
  if (csv_ == nullptr && !options_.csv_path.empty() && !csv_failed_) {
    csv_ = std::fopen(options_.csv_path.c_str(), "w");
    if (csv_ == nullptr) {
      spdlog::error("cannot write the rounds log {}", options_.csv_path);
      csv_failed_ = true;
    } else {
      std::fprintf(csv_,
                   "round,opened_s,closed_s,selected,kept,missed,selected_ranks,kept_ranks\n");
    }
  }
  if (csv_ != nullptr) {
    std::fprintf(csv_, "%lld,%.3f,%.3f,%zu,%zu,%d,%s,%s\n", static_cast<long long>(round_),
                 opened_at_, now, selected_all_.size(), uploads_.size(), missed,
                 fmt::format("{}", fmt::join(selected_ranks, " ")).c_str(),
                 fmt::format("{}", fmt::join(kept_ranks, " ")).c_str());
    std::fflush(csv_);
  }
  state_ = State::kClosing;
  const std::vector<int32_t> servers = actions_.live_servers();
  closing_servers_ = {servers.begin(), servers.end()};
  actions_.close(close);
  if (closing_servers_.empty()) OnClosed(-1, round_, live_workers, now);
}

void FedRounds::OnClosed(int32_t server, int64_t round, int live_workers, double now) {
  if (state_ != State::kClosing || round != round_) return;
  closing_servers_.erase(server);
  if (!closing_servers_.empty()) return;
  state_ = State::kWaiting;
  ++round_;
  AnswerWatchers();
  if (finished()) return FinishEveryone();
  MaybeOpen(live_workers, now);
}

void FedRounds::FinishEveryone() {
  spdlog::info("all {} rounds done", round_);
  proto::FedRound done;
  done.set_finished(true);
  done.set_round(round_);
  for (auto& [id, a] : idle_) actions_.answer_checkin(a, done);
  idle_.clear();
}

void FedRounds::Watch(Arrival a, int64_t rounds, int live_workers, double now) {
  evaluators_.insert(a.worker);
  idle_.erase(a.worker);
  watchers_.emplace(rounds, std::move(a));
  AnswerWatchers();
  MaybeOpen(live_workers, now);  // one client fewer to wait for
}

void FedRounds::AnswerWatchers() {
  proto::FedRound answer;
  answer.set_round(round_);  // rounds closed
  answer.set_finished(finished());
  const auto last = finished() ? watchers_.end() : watchers_.upper_bound(round_);
  for (auto it = watchers_.begin(); it != last; ++it) actions_.answer_watch(it->second, answer);
  watchers_.erase(watchers_.begin(), last);
}

void FedRounds::RemoveClient(int32_t id, int live_workers, double now) {
  evaluators_.erase(id);
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    it = it->second.worker == id ? watchers_.erase(it) : std::next(it);
  }
  idle_.erase(id);
  selected_.erase(id);  // Close counts the round as missed for it unless it uploaded first
  MaybeClose(live_workers, now);
  MaybeOpen(live_workers, now);
}

void FedRounds::RemoveServer(int32_t id, int live_workers, double now) {
  if (state_ == State::kClosing) OnClosed(id, round_, live_workers, now);
}

void FedRounds::Tick(int live_workers, double now) {
  MaybeClose(live_workers, now);
  MaybeOpen(live_workers, now);
}

}  // namespace hetps
