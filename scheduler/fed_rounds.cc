#include "scheduler/fed_rounds.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

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
  auto dp = ParsePrivacy(o.dp);
  if (!dp.ok()) return Status::InvalidArgument("--dp: " + dp.status().message());
  if (dp->mode == Privacy::Mode::kCentral && o.concurrency > 0) {
    return Status::InvalidArgument(
        "--dp=central adds its noise to each round's sum (dp_fedavg): it needs synchronous "
        "rounds, not --concurrency; --dp=local works with both");
  }
  if (Status s = FedPrivacy::Check(*dp, std::max(o.clients_per_round, 1)); !s.ok()) {
    return Status::InvalidArgument("--dp: " + s.message());
  }
  if (dp->adaptive() && o.concurrency > 0) {
    return Status::InvalidArgument(
        "--dp with quantile (adaptive clipping) steps the clip at each round's close: it needs "
        "synchronous rounds, not --concurrency");
  }
  if (dp->adaptive() && o.late_rounds > 0) {
    return Status::InvalidArgument(
        "--dp with quantile (adaptive clipping) changes the clip every round: a late upload "
        "clipped at an earlier round's norm would exceed the noise of the round it joins; not "
        "with --late_rounds");
  }
  if (auto spec = Selections().Parse(o.selection); !spec.ok()) {
    return Status::InvalidArgument("--selection: " + spec.status().message());
  }
  if (o.late_rounds < 0 || (o.late_rounds > 0 && o.concurrency > 0)) {
    return Status::InvalidArgument(
        "late_rounds must be >= 0 and is for synchronous rounds (asynchronous uploads are never "
        "late)");
  }
  auto secure = ParseSecureAggregation(o.secure_aggregation);
  if (!secure.ok()) {
    return Status::InvalidArgument("--secure_aggregation: " + secure.status().message());
  }
  if (secure->on && o.late_rounds > 0) {
    return Status::InvalidArgument(
        "--secure_aggregation sums a round's uploads under masks that cancel only within it: "
        "not with --late_rounds");
  }
  if (secure->on && o.concurrency > 0 &&
      (o.clients_per_round < 2 || o.quorum != 1 || !o.ratio.empty() ||
       o.concurrency < static_cast<int>(std::ceil(o.clients_per_round * o.overcommit - 1e-9)))) {
    return Status::InvalidArgument(
        "--secure_aggregation with --concurrency runs FedBuff's buffer as cohorts: "
        "--clients_per_round=K >= 2 uploads per step, ceil(K x overcommit) clients granted "
        "together, at most --concurrency; not with --quorum or --ratio");
  }
  if (dp->mode == Privacy::Mode::kDistributed && !secure->on) {
    return Status::InvalidArgument(
        "--dp=distributed splits the noise among a round's clients, which hides each update only "
        "in the sum: it needs --secure_aggregation");
  }
  if (secure->on && dp->mode == Privacy::Mode::kCentral) {
    return Status::InvalidArgument(
        "--secure_aggregation hides each update from the servers, so they cannot add the noise: "
        "use --dp=distributed (each client adds its share) or --dp=local with it, not "
        "--dp=central");
  }
  return Status();
}

FedRounds::FedRounds(const FedRoundsOptions& options, Actions actions)
    : options_(options),
      actions_(std::move(actions)),
      rng_(options.seed),
      log_(options.csv_path, options.virtual_time),
      privacy_(
          [&] {  // validated before: a bad spec is never reached
            auto dp = ParsePrivacy(options.dp);
            return dp.ok() ? *dp : Privacy();
          }(),
          std::max(options.clients_per_round, 1), options.seed) {
  if (auto secure = ParseSecureAggregation(options.secure_aggregation); secure.ok()) {
    secure_options_ = *secure;  // validated before
  }
  auto policy = MakeSelection(options_.selection);
  if (!policy.ok()) policy = MakeSelection("random");  // validated before; never reached
  policy_ = std::move(*policy);
  if (!options_.ratio.empty()) {
    auto ratio = MakeRatioPolicy(options_.ratio);
    if (ratio.ok()) ratio_ = std::move(*ratio);  // validated before
  }
}

FedRounds::~FedRounds() = default;

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
  TakeClipReport(id, request);
  const int64_t up = std::max<int64_t>(0, request.bytes_up());
  const int64_t down = std::max<int64_t>(0, request.bytes_down());
  c.bytes_up += up;
  c.bytes_down += down;
  log_.AddBytes(up, down);
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
  log_.Measured(e);
  spdlog::debug("evaluator {} measured accuracy {:.4f} after {} aggregations", id, e.accuracy(),
                e.round());
}

void FedRounds::Dropped(int32_t worker) { log_.Dropped(clients_[worker].rank); }

void FedRounds::Applied(const std::vector<int32_t>& kept, const std::vector<int64_t>& bases,
                        double now, size_t late) {
  const int64_t aggregation = ++round_;
  std::vector<int> ranks;
  std::vector<int64_t> staleness;
  for (size_t i = 0; i < kept.size(); ++i) {
    ranks.push_back(clients_[kept[i]].rank);
    staleness.push_back(i < bases.size() ? std::max<int64_t>(0, aggregation - 1 - bases[i]) : 0);
  }
  privacy_.Applied(ranks, round_selected_, round_population_);
  log_.Applied(aggregation, ranks, staleness, late, now, privacy_.epsilon(),
               privacy_.adaptive() ? std::optional<double>(closed_clip_) : std::nullopt);
  AnswerWatchers();
  log_.Flush();
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

namespace {

// --dp: its kind and the (epsilon, delta) spent so far; null without it.
nlohmann::json PrivacyJson(const FedPrivacy& privacy) {
  const std::optional<double> epsilon = privacy.epsilon();
  if (!epsilon) return nullptr;
  nlohmann::json j = {
      {"dp", privacy.spec().ToString()}, {"epsilon", *epsilon}, {"delta", privacy.spec().delta}};
  if (privacy.adaptive()) j["clip"] = privacy.clip();  // the next round's
  return j;
}

}  // namespace

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
  for (const proto::FedPointState& p : log_.measured()) {
    measured.push_back(
        {p.aggregation(), std::round(p.wall_s() * 1000) / 1000, p.accuracy(), p.bytes_up()});
  }
  return nlohmann::json{
      {"mode", async() ? "async" : "rounds"},
      {"applied", round_},
      {"rounds", options_.rounds},
      {"selection", options_.selection},
      {"concurrency", options_.concurrency},
      {"clients", counts},
      {"kept", log_.kept_total()},
      {"dropped", log_.dropped_total()},
      {"bytes_up", log_.bytes_up()},
      {"bytes_down", log_.bytes_down()},
      {"measured", measured},
      {"privacy", PrivacyJson(privacy_)},
      {"secure", !secure_options_.on ? nlohmann::json(nullptr)
                                     : nlohmann::json{{"spec", secure_options_.ToString()},
                                                      {"unmasked", secure_unmasked_},
                                                      {"aborted", secure_aborted_}}},
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

void FedRounds::HolderBack(int32_t worker, double now) {
  if (async()) {  // a member of one cohort training, of others (late) being unmasked
    for (auto it = cohorts_.begin(); it != cohorts_.end();) {
      SecureCohort& c = (it++)->second;  // it may finish and leave
      if (!c.members.contains(worker)) continue;
      if (c.protocol->phase() != SecureRound::Phase::kUnmask) {
        auto t = tasks_.find(worker);
        if (t != tasks_.end() && t->second.id == c.protocol->round()) c.back.insert(worker);
      } else {
        c.members.erase(worker);
        MaybeAdvanceSecure(c, now);
      }
    }
    return;
  }
  if (!secure_ || !selected_.contains(worker)) return;
  if (secure_->protocol->phase() != SecureRound::Phase::kUnmask) {
    secure_->back.insert(worker);  // it gave its task up: the unmasking will not wait for it
  } else {
    selected_.erase(worker);
    MaybeAdvanceSecure(*secure_, now);
  }
}

bool FedRounds::AwaitingServers() const {
  // A cohort being unmasked closes as soon as its holders revealed: what comes next waits, so
  // that under virtual time it sees the model the cohort applied, as after a round.
  return state_ == State::kClosing || !applying_.empty() ||
         std::any_of(cohorts_.begin(), cohorts_.end(), [](const auto& c) {
           return c.second.protocol->phase() == SecureRound::Phase::kUnmask;
         });
}

bool FedRounds::UnmaskHolder(int32_t worker, int64_t round) const {
  const SecureCohort* c = CohortOf(round);
  return c != nullptr && c->protocol->phase() == SecureRound::Phase::kUnmask &&
         c->protocol->Masking(worker) && Members(*c).contains(worker) &&
         (async() || state_ == State::kClosing);
}

void FedRounds::CheckIn(Arrival a, int live_workers, double now) {
  left_.erase(a.worker);
  // A secure round's holder back without reporting (it failed or went offline) reveals nothing:
  // the unmasking waits for it no more.
  HolderBack(a.worker, now);
  if (first_checkin_ < 0) first_checkin_ = now;
  ClientRecord& c = clients_[a.worker];
  c.id = a.worker;
  c.rank = actions_.rank_of ? actions_.rank_of(a.worker) : 0;
  if (auto t = tasks_.find(a.worker); t != tasks_.end()) {  // back without reporting its task
    const Task task = t->second;
    tasks_.erase(t);
    GiveUp(a.worker, task, "came back without reporting it", now);
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

void FedRounds::Uploaded(Arrival a, int64_t round, int live_workers, double now) {
  last_live_workers_ = live_workers;
  const bool in_time = state_ == State::kOpen && round == round_ && selected_.contains(a.worker) &&
                       static_cast<int>(uploads_.size()) < keep_ &&
                       std::find(uploads_.begin(), uploads_.end(), a.worker) == uploads_.end() &&
                       (!secure_ || (secure_->protocol->phase() == SecureRound::Phase::kMasking &&
                                     secure_->protocol->Masking(a.worker)));
  ClientRecord& c = clients_[a.worker];
  if (c.last_round == round) {  // its training time, also when it came too late
    c.train_s.push_back(now - c.selected_at);
    if (c.train_s.size() > ClientRecord::kHistory) c.train_s.erase(c.train_s.begin());
  }
  if (async()) {
    UploadedAsync(a, round, c, now);
    return MaybeGrant(live_workers, now);
  }
  UploadedSync(a, round, in_time, c);
  MaybeClose(live_workers, now);
  MaybeOpen(live_workers, now);
}

void FedRounds::OnClosed(int32_t server, int64_t round, int live_workers, double now) {
  if (async()) return OnAppliedAsync(server, round, live_workers, now);
  if (state_ != State::kClosing || round != round_) return;
  closing_servers_.erase(server);
  if (!closing_servers_.empty()) return;
  state_ = State::kWaiting;
  std::vector<int32_t> kept = uploads_;
  std::vector<int64_t> bases(uploads_.size(), round_);
  for (const proto::LateUpload& l : closing_late_) {
    kept.push_back(l.worker());
    bases.push_back(l.round());  // staleness: the rounds it is late by
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
  log_.Measuring(a.worker, rounds);  // its next measurement is after at least `rounds`
  log_.Flush();
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
    log_.Measuring(it->second.worker, round_);  // it measures now, reports with its next watch
    actions_.answer_watch(it->second, answer);
  }
  watchers_.erase(watchers_.begin(), last);
}

void FedRounds::RemoveClient(int32_t id, int live_workers, double now) {
  last_live_workers_ = live_workers;
  if (clients_.contains(id)) left_.insert(id);
  answered_.erase(id);  // a process that takes its place numbers its requests anew
  evaluators_.erase(id);
  log_.Unwatched(id);
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    it = it->second.worker == id ? watchers_.erase(it) : std::next(it);
  }
  idle_.erase(id);
  if (auto t = tasks_.find(id); t != tasks_.end()) {
    const Task task = t->second;
    tasks_.erase(t);
    GiveUp(id, task, "left or died", now);
  }
  if (async()) {
    for (auto& [task, c] : cohorts_) {  // a holder gone: its shares will not come
      c.members.erase(id);
      c.waiting.erase(id);
      c.uploads.erase(id);
    }
    MaybeAdvanceSecure(now);
    return MaybeGrant(live_workers, now);
  }
  selected_.erase(id);  // Close counts the round as missed for it unless it uploaded first
  if (secure_) {
    secure_->waiting.erase(id);
    secure_->uploads.erase(id);
    MaybeAdvanceSecure(*secure_, now);
  }
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
  if (async()) return TickAsync(live_workers, now);
  MaybeAdvanceSecure(now);
  MaybeClose(live_workers, now);
  MaybeOpen(live_workers, now);
}

std::optional<double> FedRounds::NextDeadline() const {
  if (options_.deadline_s <= 0 || finished()) return std::nullopt;
  std::optional<double> next;
  auto take = [&](double opened) {
    if (!next || opened + options_.deadline_s < *next) next = opened + options_.deadline_s;
  };
  const bool first = async() ? next_task_ == 0 : round_ == 0 && state_ == State::kWaiting;
  if (first && first_checkin_ >= 0 && !idle_.empty()) take(first_checkin_);
  if (!async() && state_ == State::kOpen) take(opened_at_);
  if (async()) {
    if (!group_.empty()) take(group_opened_);
    for (const auto& [worker, task] : tasks_) take(task.opened);
  }
  return next;
}

}  // namespace hetps
