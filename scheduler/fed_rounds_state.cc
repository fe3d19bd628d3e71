// FedRounds' durable state (FedRounds::Save, Restore, Resume): what a scheduler with --data_dir
// keeps so that, restarted, it goes on with the same round. What is kept as a message already
// (the rounds log's rows and points, late uploads, the closing round, answers) is saved as it
// is; times are kept as the saving scheduler's and mapped onto the restarted one's.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "scheduler/fed_rounds.h"

namespace hetps {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

proto::FedTaskState TaskState(int32_t worker, int64_t id, double opened_at, int64_t base) {
  proto::FedTaskState t;
  t.set_worker(worker);
  t.set_id(id);
  t.set_opened_at_s(opened_at);
  t.set_base(base);
  return t;
}

const char* ModeName(bool async) {
  return async ? "asynchronous uploads (--concurrency)" : "synchronous rounds";
}

}  // namespace

proto::FedRoundsState FedRounds::Save(double now) const {
  proto::FedRoundsState s;
  s.set_async(async());
  s.set_round(round_);
  s.set_state(static_cast<int32_t>(state_));
  s.set_opened_at_s(opened_at_);
  s.set_keep(keep_);
  s.mutable_selected()->Add(selected_.begin(), selected_.end());
  s.mutable_selected_all()->Add(selected_all_.begin(), selected_all_.end());
  s.mutable_uploads()->Add(uploads_.begin(), uploads_.end());
  s.mutable_late()->Add(late_.begin(), late_.end());
  s.mutable_closing_late()->Add(closing_late_.begin(), closing_late_.end());
  if (state_ == State::kClosing) *s.mutable_closing() = closing_;
  s.mutable_closing_servers()->Add(closing_servers_.begin(), closing_servers_.end());
  SaveClients(s);
  s.mutable_evaluators()->Add(evaluators_.begin(), evaluators_.end());
  s.set_first_checkin_at_s(first_checkin_);
  std::ostringstream rng;
  rng << rng_;
  s.set_rng(rng.str());
  SaveTasks(s);
  log_.Save(s);
  privacy_.Save(*s.mutable_privacy());
  s.set_saved_unix_s(UnixNow());
  s.set_saved_now_s(now);
  return s;
}

void FedRounds::SaveClients(proto::FedRoundsState& s) const {
  for (const auto& [id, c] : clients_) {
    proto::FedClientState* p = s.add_clients();
    p->set_id(c.id);
    p->set_rank(c.rank);
    p->set_selected(c.selected);
    p->set_kept(c.kept);
    p->set_missed(c.missed);
    p->set_consecutive_missed(c.consecutive_missed);
    p->set_last_round(c.last_round);
    p->set_last_missed(c.last_missed);
    p->set_selected_at_s(c.selected_at);
    p->mutable_train_s()->Add(c.train_s.begin(), c.train_s.end());
    p->mutable_missed_rounds()->Add(c.missed_rounds.begin(), c.missed_rounds.end());
    p->set_bytes_up(c.bytes_up);
    p->set_bytes_down(c.bytes_down);
    proto::ClientProfile* profile = p->mutable_profile();
    profile->set_slowdown(c.slowdown);
    profile->set_up_mbps(c.up_mbps);
    profile->set_down_mbps(c.down_mbps);
    profile->set_latency_ms(c.latency_ms);
    profile->set_loss(c.loss);
    p->set_left(left_.contains(id));
    if (auto a = answered_.find(id); a != answered_.end()) {
      p->set_answered_request(a->second.request);
      p->set_answered_type(a->second.type);
      *p->mutable_answer() = a->second.answer;
    }
  }
}

void FedRounds::SaveTasks(proto::FedRoundsState& s) const {
  for (const auto& [worker, t] : tasks_) {
    *s.add_tasks() = TaskState(worker, t.id, t.opened, t.base);
  }
  s.set_next_task(next_task_);
  s.set_committed(committed_);
  s.set_aggregations(aggregations_);
  s.set_unapplied(unapplied_);
  for (const Upload& u : group_) *s.add_group() = TaskState(u.worker, u.task, 0, u.base);
  s.set_group_opened_at_s(group_opened_);
  s.set_group_quorum(group_quorum_);
  for (const auto& [id, a] : applying_) {
    proto::FedApplyingState* p = s.add_applying();
    p->set_id(id);
    p->mutable_servers()->Add(a.servers.begin(), a.servers.end());
    for (const Upload& u : a.uploads) *p->add_uploads() = TaskState(u.worker, u.task, 0, u.base);
  }
  s.mutable_recent_drops()->Add(recent_drops_.begin(), recent_drops_.end());
}

Status FedRounds::Restore(const proto::FedRoundsState& s, double now) {
  // Nothing federated happened (a cluster that trains without rounds): nothing to go on with,
  // whatever mode the restarted scheduler was given.
  if (s.clients_size() == 0 && s.evaluators_size() == 0 && s.round() == 0 && s.next_task() == 0) {
    return Status();
  }
  if (s.async() != async()) {
    return Status::FailedPrecondition(
        fmt::format("its federated state is of {} and this scheduler runs {}", ModeName(s.async()),
                    ModeName(async())));
  }
  if (s.state() < 0 || s.state() > static_cast<int32_t>(State::kClosing)) {
    return Status::Malformed(fmt::format("its federated state has round state {}", s.state()));
  }
  // The time the scheduler was down counts for the rounds log's wall times, not for deadlines.
  const double down = std::max(0.0, UnixNow() - s.saved_unix_s());
  // A time of the saving scheduler, as long before `now` as it was before its save.
  auto at = [&](double t) { return now - (s.saved_now_s() - t); };
  round_ = s.round();
  state_ = static_cast<State>(s.state());
  opened_at_ = at(s.opened_at_s());
  keep_ = s.keep();
  selected_ = {s.selected().begin(), s.selected().end()};
  selected_all_ = {s.selected_all().begin(), s.selected_all().end()};
  uploads_ = {s.uploads().begin(), s.uploads().end()};
  late_ = {s.late().begin(), s.late().end()};
  closing_late_ = {s.closing_late().begin(), s.closing_late().end()};
  closing_ = s.closing();
  closing_servers_ = {s.closing_servers().begin(), s.closing_servers().end()};
  for (const proto::FedClientState& p : s.clients()) RestoreClient(p, at(p.selected_at_s()));
  evaluators_ = {s.evaluators().begin(), s.evaluators().end()};
  first_checkin_ = s.first_checkin_at_s() < 0 ? -1 : at(s.first_checkin_at_s());
  std::istringstream rng(s.rng());
  rng >> rng_;
  if (rng.fail()) return Status::Malformed("its federated state has a damaged generator state");
  RestoreTasks(s, at);
  log_.Restore(s, at, down);
  privacy_.Restore(s.privacy());
  spdlog::info("federated {} resumed: {} aggregations applied, {} clients known{}",
               async() ? "uploads" : "rounds", round_, clients_.size(),
               state_ == State::kOpen      ? fmt::format(", round {} open", round_)
               : state_ == State::kClosing ? fmt::format(", round {} closing", round_)
                                           : "");
  return Status();
}

void FedRounds::RestoreClient(const proto::FedClientState& p, double selected_at) {
  ClientRecord& c = clients_[p.id()];
  c.id = p.id();
  c.rank = p.rank();
  c.selected = p.selected();
  c.kept = p.kept();
  c.missed = p.missed();
  c.consecutive_missed = p.consecutive_missed();
  c.last_round = p.last_round();
  c.last_missed = p.last_missed();
  c.selected_at = selected_at;
  c.train_s = {p.train_s().begin(), p.train_s().end()};
  c.missed_rounds = {p.missed_rounds().begin(), p.missed_rounds().end()};
  c.bytes_up = p.bytes_up();
  c.bytes_down = p.bytes_down();
  c.slowdown = p.profile().slowdown();
  c.up_mbps = p.profile().up_mbps();
  c.down_mbps = p.profile().down_mbps();
  c.latency_ms = p.profile().latency_ms();
  c.loss = p.profile().loss();
  if (p.left()) left_.insert(p.id());
  if (p.answered_request() != 0) {
    answered_[p.id()] = {p.answered_request(), p.answered_type(), p.answer()};
  }
}

void FedRounds::RestoreTasks(const proto::FedRoundsState& s,
                             const std::function<double(double)>& at) {
  for (const proto::FedTaskState& t : s.tasks()) {
    tasks_[t.worker()] = {t.id(), at(t.opened_at_s()), t.base()};
  }
  next_task_ = s.next_task();
  committed_ = s.committed();
  aggregations_ = s.aggregations();
  unapplied_ = s.unapplied();
  for (const proto::FedTaskState& u : s.group()) group_.push_back({u.worker(), u.id(), u.base()});
  group_opened_ = at(s.group_opened_at_s());
  group_quorum_ = s.group_quorum();
  for (const proto::FedApplyingState& a : s.applying()) {
    Applying& applying = applying_[a.id()];
    applying.servers = {a.servers().begin(), a.servers().end()};
    for (const proto::FedTaskState& u : a.uploads()) {
      applying.uploads.push_back({u.worker(), u.id(), u.base()});
    }
  }
  recent_drops_ = {s.recent_drops().begin(), s.recent_drops().end()};
}

void FedRounds::Resume(double now) {
  // Drops first: a group sent again below must not find a given-up upload still held.
  for (int64_t task : recent_drops_) {
    proto::FedRound drop;
    drop.set_round(task);
    actions_.close(drop);
  }
  const std::vector<int32_t> servers = actions_.live_servers();
  if (!async() && state_ == State::kClosing) {
    // Every live server is asked again; one that applied it answers without applying it twice.
    closing_servers_ = {servers.begin(), servers.end()};
    actions_.close(closing_);
    if (closing_servers_.empty()) OnClosed(-1, round_, last_live_workers_, now);
  }
  std::vector<int64_t> unsent;
  for (auto& [id, a] : applying_) {
    proto::FedRound close;
    close.set_round(id);
    for (const Upload& u : a.uploads) {
      close.add_workers(u.worker);
      close.add_tasks(u.task);
    }
    a.servers = {servers.begin(), servers.end()};
    if (servers.empty()) unsent.push_back(id);
    actions_.close(close);
  }
  for (int64_t id : unsent) {  // no server to apply them: counted as MaybeCloseGroup does
    const std::vector<Upload> uploads = std::move(applying_[id].uploads);
    applying_.erase(id);
    ApplyGroup(uploads, now);
  }
}

}  // namespace hetps
