// FedRounds' cohorts: FedBuff's buffer under secure aggregation (--concurrency with
// --secure_aggregation). The servers may learn only sums, so a buffer cannot be the first K
// uploads to arrive from anywhere (their masks would not cancel); it is a cohort: n =
// ceil(K x overcommit) idle clients granted together under one task number, which is one secure
// round (they agree keys and share their secrets before training, as a round's clients do), and
// whose first K masked uploads the servers sum, unmask and apply as one FedBuff step, weighted by
// the cohort's staleness (server/consistency/committed.cc). Cohorts run side by side, up to
// --concurrency clients in all; a new one opens once n slots and n idle clients are free, so a
// slow cohort holds up only itself. A member that reports after its cohort kept K is late: its
// upload is dropped, and it still reveals its shares; one that fails, leaves or passes the
// deadline is left out, as in a round, and the cohort closes with what came once no member
// still trains.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "scheduler/fed_rounds.h"

namespace hetps {

void FedRounds::MaybeGrantCohorts(int live_workers, double now) {
  const int live_clients = Clients(live_workers);
  const int n = std::min(
      live_clients,
      static_cast<int>(std::ceil(options_.clients_per_round * options_.overcommit - 1e-9)));
  while (n >= 2 && static_cast<int64_t>(tasks_.size()) + unapplied_ + n <= options_.concurrency &&
         static_cast<int>(idle_.size()) >= n && !finished() &&
         (options_.rounds == 0 ||
          aggregations_ + static_cast<int64_t>(cohorts_.size()) < options_.rounds)) {
    std::vector<const ClientRecord*> candidates;
    for (const auto& [id, a] : idle_) candidates.push_back(&clients_[id]);
    SortByRank(candidates);
    const std::vector<int32_t> picked =
        policy_->Select(candidates, n, next_task_, options_.rounds, rng_);
    const int64_t id = next_task_++;
    SecureCohort& c = cohorts_[id];
    c.keep = std::min(options_.clients_per_round, n);
    c.protocol = std::make_unique<SecureRound>(id, picked, secure_options_, options_.seed, c.keep);
    c.phase_at = now;
    c.base = round_;
    proto::FedRound grant;
    grant.set_round(id);
    *grant.mutable_secagg() = c.protocol->Task();
    log_.Start(now);
    for (int32_t w : picked) {
      auto it = idle_.find(w);
      if (it == idle_.end() || c.members.contains(w)) continue;  // a policy's mistake
      c.members.insert(w);
      tasks_[w] = Task{id, now, round_};
      Assign(it, id, grant, now);
    }
    spdlog::info("cohort {}: {} clients selected of {} idle, keeps the first {}", id,
                 c.members.size(), candidates.size(), c.keep);
  }
}

void FedRounds::UploadedCohort(const Arrival& a, int64_t task, ClientRecord& record, double now) {
  auto t = tasks_.find(a.worker);
  const bool its_task = t != tasks_.end() && t->second.id == task;
  if (its_task) tasks_.erase(t);
  SecureCohort* c = its_task || UnmaskHolder(a.worker, task) ? CohortOf(task) : nullptr;
  proto::FedRound answer;
  answer.set_round(task);
  answer.set_kept(false);
  if (c != nullptr && its_task && c->protocol->phase() == SecureRound::Phase::kMasking &&
      c->protocol->Masking(a.worker) && static_cast<int>(c->kept.size()) < c->keep) {
    c->kept.push_back(a.worker);  // answered when the cohort closes, with what to reveal
    c->uploads[a.worker] = a;
    ++record.kept;
    record.consecutive_missed = 0;
    ++unapplied_;  // its slot is held until the cohort's step is applied
    return MaybeCloseCohort(*c, now);
  }
  if (its_task) {  // late, or without a masked upload: its slot is free, its upload dropped
    ++record.missed;
    ++record.consecutive_missed;
    record.last_missed = task;
    Dropped(a.worker);
  }
  if (c != nullptr && c->protocol->phase() == SecureRound::Phase::kUnmask &&
      c->protocol->Masking(a.worker)) {
    *answer.mutable_secagg() = c->protocol->UnmaskRequest(a.worker);  // still a holder
    return AnswerUpload(a, answer);
  }
  AnswerUpload(a, answer);
  if (its_task) LeaveCohort(a.worker, task, "reported without a masked upload", now);
}

// Member `worker` of cohort `task` will not upload (given up, or reported without a masked
// upload): the cohort no longer waits for it. Once the cohort closed, the servers drop what
// it left under the cohort's clock.
void FedRounds::LeaveCohort(int32_t worker, int64_t task, const char* why, double now) {
  SecureCohort* c = CohortOf(task);
  if (c == nullptr) return DropClock(task);
  spdlog::debug("cohort {}: client {} left ({})", task, worker, why);
  c->members.erase(worker);
  c->waiting.erase(worker);
  c->uploads.erase(worker);
  MaybeAdvanceSecure(*c, now);
  if (SecureCohort* still = CohortOf(task)) MaybeCloseCohort(*still, now);
}

// The cohort closes at its K-th upload, or with what came once no member still trains.
void FedRounds::MaybeCloseCohort(SecureCohort& c, double now) {
  if (c.protocol->phase() != SecureRound::Phase::kMasking) return;
  const int64_t id = c.protocol->round();
  const bool training = std::any_of(tasks_.begin(), tasks_.end(), [&](const auto& t) {
    return t.second.id == id && !c.back.contains(t.first);
  });
  if (static_cast<int>(c.kept.size()) < c.keep && training) return;
  spdlog::info("cohort {} closes with {} uploads", id, c.kept.size());
  if (Status s = BeginUnmasking(c, c.kept, now); !s.ok()) AbortSecure(c, s, now);
}

void FedRounds::FinishCohort(SecureCohort& c, proto::SecureClose unmask, double now) {
  const int64_t id = c.protocol->round();
  proto::FedRound close;
  close.set_round(id);
  std::vector<Upload> uploads;
  const std::vector<int32_t>& unmasked = c.protocol->kept();  // sorted
  for (int32_t w : c.kept) {  // in arrival order, as the rounds log shows them
    if (!std::binary_search(unmasked.begin(), unmasked.end(), w)) continue;
    close.add_workers(w);
    close.add_tasks(id);
    uploads.push_back({w, id, c.base});
  }
  *close.mutable_secure() = std::move(unmask);
  // An upload the protocol could not count (its client never shared) frees its slot now.
  unapplied_ -= static_cast<int64_t>(c.kept.size() - uploads.size());
  ++aggregations_;
  cohorts_.erase(id);  // c is gone
  const std::vector<int32_t> servers = actions_.live_servers();
  if (servers.empty()) return ApplyGroup(uploads, now);
  applying_[id] = {{servers.begin(), servers.end()}, std::move(uploads)};
  actions_.close(close);
}

// The cohort cannot be unmasked: it applies nothing, its uploads are dropped on the servers.
void FedRounds::AbortCohort(SecureCohort& c, const Status& why, double now) {
  const int64_t id = c.protocol->round();
  ReleaseAborted(c, c.kept, why);
  unapplied_ -= static_cast<int64_t>(c.kept.size());
  cohorts_.erase(id);  // c is gone
  DropClock(id);
  MaybeGrant(last_live_workers_, now);
}

}  // namespace hetps
