#include "scheduler/fed_rounds.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/quorum.h"

namespace hetps {

Status ValidateFedRoundsOptions(const FedRoundsOptions& o) {
  if (o.clients_per_round < 0 || o.rounds < 0 || !(o.deadline_s >= 0)) {
    return Status::InvalidArgument("clients_per_round, rounds and round_deadline_ms must be >= 0");
  }
  if (!(o.overcommit >= 1.0)) return Status::InvalidArgument("overcommit must be >= 1");
  if (o.quorum < 0 || (o.concurrency > 0 && o.quorum > o.concurrency)) {
    return Status::InvalidArgument(
        "quorum must be 0 (auto) or at most concurrency: a group waits for that many uploads");
  }
  if (o.concurrency < 0) return Status::InvalidArgument("concurrency must be >= 0");
  if (o.concurrency == 0 && o.quorum != 1) {
    return Status::InvalidArgument(
        "--quorum groups asynchronous uploads: it needs --concurrency > 0 (without it the "
        "setting would do nothing)");
  }
  if (!o.ratio.empty()) {
    if (auto spec = RatioPolicies().Parse(o.ratio); !spec.ok()) {
      return Status::InvalidArgument("--ratio: " + spec.status().message());
    }
    if (o.concurrency <= 0 || o.quorum != 1) {
      return Status::InvalidArgument(
          "--ratio needs asynchronous rounds (--concurrency > 0) and takes the place of --quorum");
    }
  }
  if (auto spec = Selections().Parse(o.selection); !spec.ok()) {
    return Status::InvalidArgument("--selection: " + spec.status().message());
  }
  if (o.late_rounds < 0 || (o.late_rounds > 0 && o.concurrency > 0)) {
    return Status::InvalidArgument(
        "late_rounds must be >= 0 and is for synchronous rounds (asynchronous uploads are never "
        "late)");
  }
  return Status();
}

FedRounds::FedRounds(const FedRoundsOptions& options, Actions actions)
    : options_(options), actions_(std::move(actions)), rng_(options.seed) {
  auto policy = MakeSelection(options_.selection);
  if (!policy.ok()) policy = MakeSelection("random");  // validated before; never reached
  policy_ = std::move(*policy);
  if (!options_.ratio.empty()) {
    auto ratio = MakeRatioPolicy(options_.ratio);
    if (ratio.ok()) ratio_ = std::move(*ratio);  // validated before
  }
}

FedRounds::~FedRounds() {
  WriteRows(/*all=*/true);
  if (csv_ != nullptr) std::fclose(csv_);
}

void FedRounds::AnswerCheckin(const Arrival& a, const proto::FedRound& r) {
  answered_[a.worker] = {a.request_id, proto::ROUND_TASK, r};
  actions_.answer_checkin(a, r);
}

void FedRounds::AnswerUpload(const Arrival& a, const proto::FedRound& r) {
  answered_[a.worker] = {a.request_id, proto::ROUND_UPLOADED, r};
  actions_.answer_upload(a, r);
}

bool FedRounds::Resent(const Arrival& a) {
  auto it = answered_.find(a.worker);
  if (it == answered_.end() || it->second.request != a.request_id) return false;
  spdlog::info("client {} asked again what was answered (round {}): the same answer goes out",
               a.worker, it->second.answer.round());
  if (it->second.type == proto::ROUND_TASK) {
    actions_.answer_checkin(a, it->second.answer);
  } else {
    actions_.answer_upload(a, it->second.answer);
  }
  return true;
}

void FedRounds::Report(int32_t id, const proto::FedRound& request) {
  ClientRecord& c = clients_[id];
  const int64_t up = std::max<int64_t>(0, request.bytes_up());
  const int64_t down = std::max<int64_t>(0, request.bytes_down());
  c.bytes_up += up;
  c.bytes_down += down;
  bytes_up_ += up;
  bytes_down_ += down;
  if (request.has_profile()) {
    const proto::ClientProfile& p = request.profile();
    c.slowdown = p.slowdown();
    c.up_mbps = p.up_mbps();
    c.down_mbps = p.down_mbps();
    c.latency_ms = p.latency_ms();
    c.loss = p.loss();
  }
}

void FedRounds::Measured(int32_t id, const proto::Evaluation& e) {
  for (Row& row : rows_) {
    if (row.aggregation != e.round() || row.measured) continue;
    row.measured = true;
    row.loss = e.loss();
    row.accuracy = e.accuracy();
  }
  const auto at = std::find_if(applied_.begin(), applied_.end(),
                               [&](const Point& p) { return p.aggregation == e.round(); });
  if (at != applied_.end() && (measured_.empty() || e.round() > measured_.back().aggregation)) {
    measured_.push_back({e.round(), at->wall_s, e.accuracy(), at->bytes_up});
    if (measured_.size() > 500) measured_.pop_front();
  }
  spdlog::debug("evaluator {} measured accuracy {:.4f} after {} aggregations", id, e.accuracy(),
                e.round());
}

void FedRounds::Dropped(int32_t worker) {
  dropped_.push_back(clients_[worker].rank);
  ++dropped_total_;
}

void FedRounds::Applied(const std::vector<int32_t>& kept, const std::vector<int64_t>& bases,
                        double now, size_t late) {
  const int64_t aggregation = ++round_;
  const double wall_s = now - std::max(0.0, started_);
  applied_.push_back({aggregation, wall_s, 0, bytes_up_});
  if (applied_.size() > 4096) applied_.pop_front();
  kept_total_ += static_cast<int64_t>(kept.size());
  if (!options_.csv_path.empty() && !csv_failed_) {
    Row row;
    row.aggregation = aggregation;
    row.wall_s = wall_s;
    row.bytes_up = bytes_up_;
    row.bytes_down = bytes_down_;
    for (size_t i = 0; i < kept.size(); ++i) {
      row.kept.push_back(clients_[kept[i]].rank);
      row.staleness.push_back(i < bases.size() ? std::max<int64_t>(0, aggregation - 1 - bases[i])
                                               : 0);
    }
    row.dropped = std::move(dropped_);
    row.late = late;
    rows_.push_back(std::move(row));
  }
  dropped_.clear();
  AnswerWatchers();
  WriteRows(/*all=*/false);
}

void FedRounds::WriteRows(bool all) {
  int64_t held_from = std::numeric_limits<int64_t>::max();
  for (const auto& [id, from] : measuring_) held_from = std::min(held_from, from);
  while (!rows_.empty() && (all || rows_.front().aggregation < held_from)) {
    const Row& r = rows_.front();
    if (csv_ == nullptr && !csv_failed_) {
      // A restored run goes on with the log its previous scheduler wrote.
      const bool append = csv_append_ && std::filesystem::exists(options_.csv_path);
      csv_ = std::fopen(options_.csv_path.c_str(), append ? "a" : "w");
      if (csv_ == nullptr) {
        spdlog::error("cannot write the rounds log {}", options_.csv_path);
        csv_failed_ = true;
      } else if (!append) {
        std::fprintf(csv_,
                     "aggregation,wall_s,kept,dropped,staleness_mean,staleness_max,bytes_up,"
                     "bytes_down,test_loss,test_accuracy,kept_ranks,dropped_ranks,late\n");
      }
    }
    if (csv_ != nullptr && r.aggregation > written_) {
      written_ = r.aggregation;
      double mean = 0;
      int64_t max = 0;
      for (int64_t st : r.staleness) {
        mean += static_cast<double>(st) / static_cast<double>(r.staleness.size());
        max = std::max(max, st);
      }
      std::fprintf(csv_, "%lld,%.3f,%zu,%zu,%.2f,%lld,%lld,%lld,%s,%s,%s,%s,%zu\n",
                   static_cast<long long>(r.aggregation), r.wall_s, r.kept.size(), r.dropped.size(),
                   mean, static_cast<long long>(max), static_cast<long long>(r.bytes_up),
                   static_cast<long long>(r.bytes_down),
                   r.measured ? fmt::format("{:.4f}", r.loss).c_str() : "",
                   r.measured ? fmt::format("{:.4f}", r.accuracy).c_str() : "",
                   fmt::format("{}", fmt::join(r.kept, " ")).c_str(),
                   fmt::format("{}", fmt::join(r.dropped, " ")).c_str(), r.late);
    }
    rows_.pop_front();
  }
  if (csv_ != nullptr) std::fflush(csv_);
}

const char* FedRounds::StateOf(int32_t id) const {
  if (evaluators_.contains(id)) return "evaluator";
  if (left_.contains(id)) return "left";
  if (idle_.contains(id)) return "idle";
  if (tasks_.contains(id)) return "training";
  if (state_ != State::kWaiting &&
      std::find(uploads_.begin(), uploads_.end(), id) != uploads_.end()) {
    return "uploaded";
  }
  for (const Upload& u : group_) {
    if (u.worker == id) return "uploaded";
  }
  if (state_ == State::kOpen && selected_.contains(id)) return "training";
  return "away";
}

std::string FedRounds::SummaryJson() const {
  if (clients_.empty() && evaluators_.empty()) return "";
  nlohmann::json counts = {{"idle", 0}, {"training", 0}, {"uploaded", 0},
                           {"away", 0}, {"left", 0},     {"evaluator", 0}};
  nlohmann::json per_client = nlohmann::json::object();
  for (const auto& [id, c] : clients_) {
    const char* state = StateOf(id);
    counts[state] = counts[state].get<int>() + 1;
    per_client[std::to_string(c.rank)] = {
        {"state", state}, {"selected", c.selected}, {"kept", c.kept}, {"missed", c.missed}};
  }
  counts["evaluator"] = static_cast<int>(evaluators_.size());
  nlohmann::json measured = nlohmann::json::array();
  for (const Point& p : measured_) {
    measured.push_back({p.aggregation, std::round(p.wall_s * 1000) / 1000, p.accuracy, p.bytes_up});
  }
  return nlohmann::json{{"mode", async() ? "async" : "rounds"},
                        {"applied", round_},
                        {"rounds", options_.rounds},
                        {"selection", options_.selection},
                        {"concurrency", options_.concurrency},
                        {"clients", counts},
                        {"kept", kept_total_},
                        {"dropped", dropped_total_},
                        {"bytes_up", bytes_up_},
                        {"bytes_down", bytes_down_},
                        {"measured", measured},
                        {"per_client", per_client}}
      .dump();
}

void FedRounds::WriteClients(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    spdlog::error("cannot write the clients log {}", path);
    return;
  }
  std::fprintf(f,
               "rank,state,slowdown,up_mbps,down_mbps,latency_ms,loss,selected,kept,missed,"
               "bytes_up,bytes_down,mean_round_trip_s\n");
  std::vector<std::pair<int, int32_t>> by_rank;
  for (const auto& [id, c] : clients_) by_rank.push_back({c.rank, id});
  std::sort(by_rank.begin(), by_rank.end());
  for (const auto& [rank, id] : by_rank) {
    const ClientRecord& c = clients_.at(id);
    double mean = 0;
    for (double t : c.train_s) mean += t / static_cast<double>(c.train_s.size());
    std::fprintf(f, "%d,%s,%.3f,%.3f,%.3f,%.1f,%.4f,%lld,%lld,%lld,%lld,%lld,%.3f\n", c.rank,
                 StateOf(id), c.slowdown, c.up_mbps, c.down_mbps, c.latency_ms, c.loss,
                 static_cast<long long>(c.selected), static_cast<long long>(c.kept),
                 static_cast<long long>(c.missed), static_cast<long long>(c.bytes_up),
                 static_cast<long long>(c.bytes_down), mean);
  }
  std::fclose(f);
}

void FedRounds::CheckIn(Arrival a, int live_workers, double now) {
  left_.erase(a.worker);
  if (first_checkin_ < 0) first_checkin_ = now;
  ClientRecord& c = clients_[a.worker];
  c.id = a.worker;
  c.rank = actions_.rank_of ? actions_.rank_of(a.worker) : 0;
  if (auto t = tasks_.find(a.worker); t != tasks_.end()) {  // back without reporting its task
    const Task task = t->second;
    tasks_.erase(t);
    GiveUp(a.worker, task, "came back without reporting it");
  }
  if (finished()) {
    proto::FedRound done;
    done.set_finished(true);
    done.set_round(round_);
    return AnswerCheckin(a, done);
  }
  idle_[a.worker] = std::move(a);
  if (async()) return MaybeGrant(live_workers, now);
  MaybeOpen(live_workers, now);
}

void FedRounds::MaybeGrant(int live_workers, double now) {
  last_live_workers_ = live_workers;
  const int live_clients = Clients(live_workers);
  if (next_task_ == 0 && static_cast<int>(idle_.size()) < live_clients && !WaitedLongEnough(now)) {
    return;
  }
  // A committed upload holds its slot until every server applied it, so a client granted the
  // slot pulls a model with it (with C = 1 the run is exactly sequential).
  while (static_cast<int64_t>(tasks_.size()) + unapplied_ < options_.concurrency &&
         !idle_.empty() && !finished() &&
         (options_.rounds == 0 || aggregations_ < options_.rounds)) {
    std::vector<const ClientRecord*> candidates;
    for (const auto& [id, a] : idle_) candidates.push_back(&clients_[id]);
    const std::vector<int32_t> picked =
        policy_->Select(candidates, 1, next_task_, options_.rounds, rng_);
    auto it = picked.empty() ? idle_.end() : idle_.find(picked[0]);
    if (it == idle_.end()) it = idle_.begin();  // a policy's mistake
    const int32_t id = it->first;
    if (started_ < 0) started_ = now;
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
  const bool late = options_.deadline_s > 0 && now - group_opened_ >= options_.deadline_s;
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

void FedRounds::GiveUp(int32_t worker, const Task& task, const char* why) {
  ClientRecord& c = clients_[worker];
  ++c.missed;
  ++c.consecutive_missed;
  c.last_missed = task.id;
  c.missed_rounds.push_back(task.id);
  if (c.missed_rounds.size() > ClientRecord::kHistory)
    c.missed_rounds.erase(c.missed_rounds.begin());
  spdlog::info("task {} of client {} given up: it {}", task.id, c.rank, why);
  Dropped(worker);
  proto::FedRound drop;
  drop.set_round(task.id);
  recent_drops_.push_back(task.id);
  if (recent_drops_.size() > 64) recent_drops_.pop_front();
  actions_.close(drop);  // no answers awaited: nothing waits for a drop
}

void FedRounds::UploadedAsync(const Arrival& a, int64_t task, ClientRecord& c, double now) {
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
      GiveUp(a.worker, open, "finished after the run's last update");
    }
  }
  answer.set_kept(its_task && wanted);
  AnswerUpload(a, answer);
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
  if (idle < std::min(want, live_clients) ||
      (round_ == 0 && idle < live_clients && !WaitedLongEnough(now))) {
    return;
  }
  std::vector<const ClientRecord*> candidates;
  for (const auto& [id, a] : idle_) candidates.push_back(&clients_[id]);
  const int count = std::min<int>(want, static_cast<int>(candidates.size()));
  if (count <= 0) return;
  const std::vector<int32_t> picked =
      policy_->Select(candidates, count, round_, options_.rounds, rng_);
  state_ = State::kOpen;
  opened_at_ = now;
  if (started_ < 0) started_ = now;
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
    AnswerCheckin(it->second, task);
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
  last_live_workers_ = live_workers;
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
  if (async()) {
    UploadedAsync(a, round, c, now);
    return MaybeGrant(live_workers, now);
  }
  // Late: its round closed without it; the next close takes it if it is late by at most
  // late_rounds (the servers keep it that long).
  const int64_t next_close = state_ == State::kClosing ? round_ + 1 : round_;
  const bool closed = round < round_ || (round == round_ && state_ == State::kClosing);
  const bool late = !in_time && options_.late_rounds > 0 && closed && c.last_round == round &&
                    next_close - round <= options_.late_rounds &&
                    (options_.rounds == 0 || next_close < options_.rounds) &&
                    std::none_of(late_.begin(), late_.end(), [&](const LateUpload& l) {
                      return l.worker == a.worker && l.round == round;
                    });
  if (in_time || late) {
    if (in_time) {
      uploads_.push_back(a.worker);
    } else {
      late_.push_back({a.worker, round});
    }
    ++c.kept;
    c.consecutive_missed = 0;
  }
  if (late)
    spdlog::info("worker {}'s upload of round {} is late; round {} takes it", a.worker, round,
                 next_close);
  answer.set_kept(in_time || late);
  AnswerUpload(a, answer);
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
    Dropped(id);
  }
  proto::FedRound close;
  close.set_round(round_);
  for (int32_t id : uploads_) close.add_workers(id);
  close.set_late_rounds(options_.late_rounds);
  closing_late_.clear();
  for (const LateUpload& l : std::exchange(late_, {})) {
    if (round_ - l.round > options_.late_rounds) continue;  // the servers dropped it
    proto::LateUpload* entry = close.add_late();
    entry->set_worker(l.worker);
    entry->set_round(l.round);
    entry->set_factor(static_cast<double>(l.round + 1) / static_cast<double>(round_ + 1));
    closing_late_.push_back(l);
  }
  spdlog::info(
      "round {} closes with {} uploads{} ({} selected clients missed it)", round_, uploads_.size(),
      closing_late_.empty() ? "" : fmt::format(" and {} late ones", closing_late_.size()), missed);
  state_ = State::kClosing;
  const std::vector<int32_t> servers = actions_.live_servers();
  closing_servers_ = {servers.begin(), servers.end()};
  closing_ = close;
  actions_.close(close);
  if (closing_servers_.empty()) OnClosed(-1, round_, live_workers, now);
}

void FedRounds::OnClosed(int32_t server, int64_t round, int live_workers, double now) {
  if (async()) {
    auto it = applying_.find(round);
    if (it == applying_.end()) return;
    it->second.servers.erase(server);
    if (!it->second.servers.empty()) return;
    const std::vector<Upload> uploads = std::move(it->second.uploads);
    applying_.erase(it);
    ApplyGroup(uploads, now);  // commits applied everywhere
    if (finished()) return FinishEveryone();
    return MaybeGrant(live_workers, now);
  }
  if (state_ != State::kClosing || round != round_) return;
  closing_servers_.erase(server);
  if (!closing_servers_.empty()) return;
  state_ = State::kWaiting;
  std::vector<int32_t> kept = uploads_;
  std::vector<int64_t> bases(uploads_.size(), round_);
  for (const LateUpload& l : closing_late_) {
    kept.push_back(l.worker);
    bases.push_back(l.round);  // staleness: the rounds it is late by
  }
  Applied(kept, bases, now, closing_late_.size());
  if (finished()) return FinishEveryone();
  MaybeOpen(live_workers, now);
}

void FedRounds::FinishEveryone() {
  if (!options_.csv_path.empty()) {
    const std::string dir = std::filesystem::path(options_.csv_path).parent_path().string();
    WriteClients((dir.empty() ? std::string(".") : dir) + "/clients.csv");
  }
  spdlog::info("all {} rounds done", round_);
  proto::FedRound done;
  done.set_finished(true);
  done.set_round(round_);
  for (auto& [id, a] : idle_) AnswerCheckin(a, done);
  idle_.clear();
}

void FedRounds::Watch(Arrival a, int64_t rounds, int live_workers, double now) {
  evaluators_.insert(a.worker);
  idle_.erase(a.worker);
  measuring_[a.worker] = rounds;  // its next measurement is after at least `rounds`
  WriteRows(/*all=*/false);
  for (auto it = watchers_.begin(); it != watchers_.end();) {  // one wait per evaluator
    it = it->second.worker == a.worker ? watchers_.erase(it) : std::next(it);
  }
  watchers_.emplace(rounds, std::move(a));
  AnswerWatchers();
  if (async()) return MaybeGrant(live_workers, now);
  MaybeOpen(live_workers, now);  // one client fewer to wait for
}

void FedRounds::AnswerWatchers() {
  proto::FedRound answer;
  answer.set_round(round_);  // rounds closed
  answer.set_finished(finished());
  const auto last = finished() ? watchers_.end() : watchers_.upper_bound(round_);
  for (auto it = watchers_.begin(); it != last; ++it) {
    measuring_[it->second.worker] = round_;  // it measures now and reports with its next watch
    actions_.answer_watch(it->second, answer);
  }
  watchers_.erase(watchers_.begin(), last);
}

void FedRounds::RemoveClient(int32_t id, int live_workers, double now) {
  if (clients_.contains(id)) left_.insert(id);
  answered_.erase(id);  // a process that takes its place numbers its requests anew
  evaluators_.erase(id);
  if (measuring_.erase(id) > 0) WriteRows(/*all=*/false);
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    it = it->second.worker == id ? watchers_.erase(it) : std::next(it);
  }
  idle_.erase(id);
  if (auto t = tasks_.find(id); t != tasks_.end()) {
    const Task task = t->second;
    tasks_.erase(t);
    GiveUp(id, task, "left or died");
  }
  if (async()) return MaybeGrant(live_workers, now);
  selected_.erase(id);  // Close counts the round as missed for it unless it uploaded first
  MaybeClose(live_workers, now);
  MaybeOpen(live_workers, now);
}

void FedRounds::RemoveServer(int32_t id, int live_workers, double now) {
  if (async()) {
    std::vector<int64_t> tasks;
    for (const auto& [task, applying] : applying_) tasks.push_back(task);
    for (int64_t task : tasks) OnClosed(id, task, live_workers, now);
    return;
  }
  if (state_ == State::kClosing) OnClosed(id, round_, live_workers, now);
}

void FedRounds::Tick(int live_workers, double now) {
  last_live_workers_ = live_workers;
  if (async()) {
    MaybeCloseGroup(now, live_workers);
    if (options_.deadline_s <= 0) return MaybeGrant(live_workers, now);
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (now - it->second.opened < options_.deadline_s) {
        ++it;
        continue;
      }
      const int32_t worker = it->first;
      const Task task = it->second;
      it = tasks_.erase(it);
      GiveUp(worker, task, "passed the deadline");
    }
    return MaybeGrant(live_workers, now);
  }
  MaybeClose(live_workers, now);
  MaybeOpen(live_workers, now);
}

}  // namespace hetps
