// FedRounds' asynchronous mode (--concurrency > 0): granting tasks to idle clients, committing
// their uploads into aggregations (single, quorum groups or a ratio policy's), giving tasks up,
// and counting an aggregation once every server applied it.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/quorum.h"
#include "scheduler/fed_rounds.h"

namespace hetps {

void FedRounds::MaybeGrant(int live_workers, double now) {
  last_live_workers_ = live_workers;
  const int live_clients = Clients(live_workers);
  if (next_task_ == 0 && static_cast<int>(idle_.size()) < live_clients && !WaitedLongEnough(now)) {
    return;
  }
  if (secure_options_.on) return MaybeGrantCohorts(live_workers, now);
  // A committed upload holds its slot until every server applied it, so a client granted the
  // slot pulls a model with it (with C = 1 the run is exactly sequential).
  while (static_cast<int64_t>(tasks_.size()) + unapplied_ < options_.concurrency &&
         !idle_.empty() && !finished() &&
         (options_.rounds == 0 || aggregations_ < options_.rounds)) {
    std::vector<const ClientRecord*> candidates;
    for (const auto& [id, a] : idle_) candidates.push_back(&clients_[id]);
    SortByRank(candidates);
    const std::vector<int32_t> picked =
        policy_->Select(candidates, 1, next_task_, options_.rounds, rng_);
    auto it = picked.empty() ? idle_.end() : idle_.find(picked[0]);
    if (it == idle_.end()) it = idle_.begin();  // a policy's mistake
    const int32_t id = it->first;
    log_.Start(now);
    const Task task{next_task_++, now, round_};
    tasks_[id] = task;
    ClientRecord& c = clients_[id];
    ++c.selected;
    c.last_round = task.id;
    c.selected_at = now;
    proto::FedRound grant;
    grant.set_round(task.id);
    AnswerCheckin(it->second, grant);
    idle_.erase(it);
  }
}

void FedRounds::Commit(int32_t worker, const Task& task, double now) {
  ++committed_;
  ++unapplied_;
  group_.push_back({worker, task.id, task.base});
  if (group_.size() == 1) {
    group_opened_ = now;
    if (ratio_) {  // AAFL: this aggregation's ratio, from the in-flight clients' times
      const int clients = std::max(1, std::min(options_.concurrency, Clients(last_live_workers_)));
      const double alpha = ratio_->Ratio({.clients = clients,
                                          .train_s = TrainTimeEmas(/*in_flight_only=*/true),
                                          .aggregation = aggregations_});
      group_quorum_ = UploadsFor(alpha, clients);
      spdlog::info("aggregation {}: ratio {:.2f} of {} clients, the earliest {} uploads",
                   aggregations_, alpha, clients, group_quorum_);
    }
  }
  MaybeCloseGroup(now, last_live_workers_);
}

std::vector<double> FedRounds::TrainTimeEmas(bool in_flight_only) const {
  std::vector<double> times;
  for (const auto& [id, c] : clients_) {
    if (c.train_s.empty()) continue;
    if (in_flight_only && !tasks_.contains(id) &&
        std::none_of(group_.begin(), group_.end(),
                     [id](const Upload& u) { return u.worker == id; })) {
      continue;
    }
    double ema = c.train_s[0];
    for (double t : c.train_s) ema = 0.5 * t + 0.5 * ema;
    times.push_back(ema);
  }
  return times;
}

int FedRounds::Quorum(int live_workers) const {
  int k = ratio_ ? group_quorum_ : options_.quorum;
  if (!ratio_ && k == 0) {  // auto: the K with the most uploads per unit time
    const std::vector<double> times = TrainTimeEmas(/*in_flight_only=*/false);
    k = times.size() < 2 ? options_.concurrency : static_cast<int>(AutoQuorum(times));
  }
  return std::max(1, std::min({k, options_.concurrency, std::max(1, Clients(live_workers))}));
}

void FedRounds::MaybeCloseGroup(double now, int live_workers) {
  if (group_.empty()) return;
  const bool late = options_.deadline_s > 0 && now >= group_opened_ + options_.deadline_s;
  if (static_cast<int>(group_.size()) < Quorum(live_workers) && !late) return;
  proto::FedRound close;
  int64_t id = 0;
  for (const Upload& u : group_) {
    close.add_workers(u.worker);
    close.add_tasks(u.task);
    id = std::max(id, u.task);
  }
  close.set_round(id);
  ++aggregations_;
  std::vector<Upload> uploads = std::move(group_);
  group_.clear();
  const std::vector<int32_t> servers = actions_.live_servers();
  if (servers.empty()) return ApplyGroup(uploads, now);
  applying_[id] = {{servers.begin(), servers.end()}, std::move(uploads)};
  actions_.close(close);
}

void FedRounds::ApplyGroup(const std::vector<Upload>& uploads, double now) {
  unapplied_ -= static_cast<int64_t>(uploads.size());
  std::vector<int32_t> kept;
  std::vector<int64_t> bases;
  for (const Upload& u : uploads) {
    kept.push_back(u.worker);
    bases.push_back(u.base);
  }
  Applied(kept, bases, now);
}

void FedRounds::GiveUp(int32_t worker, const Task& task, const char* why, double now) {
  ClientRecord& c = clients_[worker];
  ++c.missed;
  ++c.consecutive_missed;
  c.last_missed = task.id;
  c.missed_rounds.push_back(task.id);
  if (c.missed_rounds.size() > ClientRecord::kHistory)
    c.missed_rounds.erase(c.missed_rounds.begin());
  spdlog::info("task {} of client {} given up: it {}", task.id, c.rank, why);
  Dropped(worker);
  if (secure_options_.on) return LeaveCohort(worker, task.id, why, now);
  DropClock(task.id);
}

void FedRounds::DropClock(int64_t task) {
  proto::FedRound drop;
  drop.set_round(task);
  recent_drops_.push_back(task);
  if (recent_drops_.size() > 64) recent_drops_.pop_front();
  actions_.close(drop);  // no answers awaited: nothing waits for a drop
}

void FedRounds::UploadedAsync(const Arrival& a, int64_t task, ClientRecord& c, double now) {
  if (secure_options_.on) return UploadedCohort(a, task, c, now);
  proto::FedRound answer;
  answer.set_round(task);
  auto t = tasks_.find(a.worker);
  const bool its_task = t != tasks_.end() && t->second.id == task;
  const bool wanted = options_.rounds == 0 || aggregations_ < options_.rounds;
  if (its_task) {
    const Task open = t->second;
    tasks_.erase(t);
    if (wanted) {
      ++c.kept;
      c.consecutive_missed = 0;
      Commit(a.worker, open, now);
    } else {
      GiveUp(a.worker, open, "finished after the run's last update", now);
    }
  }
  answer.set_kept(its_task && wanted);
  AnswerUpload(a, answer);
}

void FedRounds::OnAppliedAsync(int32_t server, int64_t round, int live_workers, double now) {
  auto it = applying_.find(round);
  if (it == applying_.end()) return;
  it->second.servers.erase(server);
  if (!it->second.servers.empty()) return;
  const std::vector<Upload> uploads = std::move(it->second.uploads);
  applying_.erase(it);
  ApplyGroup(uploads, now);  // commits applied everywhere
  if (finished()) return FinishEveryone();
  MaybeGrant(live_workers, now);
}

void FedRounds::TickAsync(int live_workers, double now) {
  MaybeAdvanceSecure(now);  // a cohort's unmasking waits at most so long
  MaybeCloseGroup(now, live_workers);
  if (options_.deadline_s > 0) {
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (now < it->second.opened + options_.deadline_s) {
        ++it;
        continue;
      }
      const int32_t worker = it->first;
      const Task task = it->second;
      it = tasks_.erase(it);
      GiveUp(worker, task, "passed the deadline", now);
    }
  }
  MaybeGrant(live_workers, now);
}

}  // namespace hetps
