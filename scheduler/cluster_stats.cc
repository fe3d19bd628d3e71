#include "scheduler/cluster_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/quorum.h"
#include "scheduler/layer_planner.h"

namespace hetps {
namespace {

// A worker reports one transport per server rank; more is a broken report.
constexpr int kMaxServersReported = 4096;

using Json = nlohmann::json;

double Ewma(double old, double sample) { return old < 0 ? sample : 0.5 * old + 0.5 * sample; }

double MeanOf(const std::vector<int64_t>& counts) {
  int64_t n = 0;
  double sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    n += counts[i];
    sum += static_cast<double>(i) * counts[i];
  }
  return n ? sum / n : 0;
}

int64_t MaxOf(const std::vector<int64_t>& counts) {
  for (size_t i = counts.size(); i-- > 0;) {
    if (counts[i] > 0) return static_cast<int64_t>(i);
  }
  return 0;
}

}  // namespace

// Prometheus text exposition: one family at a time, HELP and TYPE first.
ClusterStats::ClusterStats(int num_servers, int num_workers, ClusterStatsOptions options)
    : num_servers_(num_servers),
      num_workers_(num_workers),
      options_(options),
      detector_(options.straggler) {}

ClusterStats::WorkerRecord* ClusterStats::Worker(int32_t id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

ClusterStats::ServerRecord* ClusterStats::Server(int32_t id) {
  auto it = servers_.find(id);
  return it == servers_.end() ? nullptr : &it->second;
}

void ClusterStats::OnJoin(const proto::NodeInfo& node, double now) {
  if (start_ < 0) start_ = now;
  if (node.role() == proto::WORKER) {
    WorkerRecord& w = workers_[node.id()];
    w.info = node;
    w.last_heard = now;
  } else if (node.role() == proto::SERVER) {
    ServerRecord& s = servers_[node.id()];
    s.info = node;
    s.last_heard = now;
  } else if (node.role() == proto::AGGREGATOR) {
    AggregatorRecord& a = aggregators_[node.id()];
    a.info = node;
    a.last_heard = now;
  }
}

void ClusterStats::OnHeard(int32_t id, double now) {
  if (WorkerRecord* w = Worker(id)) w->last_heard = now;
  if (ServerRecord* s = Server(id)) s->last_heard = now;
  if (auto a = aggregators_.find(id); a != aggregators_.end()) a->second.last_heard = now;
}

void ClusterStats::OnLeft(int32_t id, double now) {
  OnHeard(id, now);
  if (WorkerRecord* w = Worker(id)) {
    w->state = "left";
    w->straggler.slow = w->straggler.late = false;
  }
  if (ServerRecord* s = Server(id)) s->state = "left";
  if (auto a = aggregators_.find(id); a != aggregators_.end()) a->second.state = "left";
}

void ClusterStats::OnDead(int32_t id, double) {
  if (WorkerRecord* w = Worker(id)) {
    w->state = "dead";
    w->straggler.slow = w->straggler.late = false;
  }
  if (ServerRecord* s = Server(id)) s->state = "dead";
  if (auto a = aggregators_.find(id); a != aggregators_.end()) a->second.state = "dead";
}

void ClusterStats::OnServerRestarted(int32_t id, int32_t old) {
  if (ServerRecord* s = Server(old)) s->state = "replaced";
  if (ServerRecord* s = Server(id)) s->state = "recovering";
}

void ClusterStats::OnServerBack(int32_t id) {
  if (ServerRecord* s = Server(id); s != nullptr && s->state == "recovering") s->state = "alive";
}

void ClusterStats::OnWorkerReport(int32_t id, const proto::WorkerReport& r, double now) {
  WorkerRecord* w = Worker(id);
  if (w == nullptr || w->state != "alive") return;
  w->last_heard = now;
  w->clock = std::max(w->clock, r.clock());
  for (double ms : r.iteration_ms()) {
    if (!(ms >= 0) || !std::isfinite(ms)) continue;  // a confused worker skews nothing
    w->iteration.Add(ms / 1000.0);
    detector_.OnIteration(w->straggler, ms);
  }
  for (double ms : r.wait_ms()) {
    if (!(ms >= 0) || !std::isfinite(ms)) continue;
    w->wait_ewma_ms = Ewma(w->wait_ewma_ms, ms);
    w->wait_total_ms += ms;
  }
  StragglerDetector::SetBusy(w->straggler, r.busy_ms());
  for (int i = 0; i < r.staleness_counts_size(); ++i) {
    const size_t bucket = std::min<size_t>(i, kStalenessBuckets - 1);
    w->staleness[bucket] += std::max<int64_t>(0, r.staleness_counts(i));
  }
  w->bytes_pushed = std::max(w->bytes_pushed, r.bytes_pushed());
  w->raw_bytes_pushed = std::max(w->raw_bytes_pushed, r.raw_bytes_pushed());
  w->bytes_pulled = std::max(w->bytes_pulled, r.bytes_pulled());
  w->co_located_bytes = std::max(w->co_located_bytes, r.co_located_bytes());
  // Untrusted: kept only in a bounded shape (a word per server rank).
  if (r.transports_size() > 0 && r.transports_size() <= kMaxServersReported) {
    w->transports.clear();
    for (const std::string& t : r.transports()) {
      const bool word = !t.empty() && t.size() <= 16 && std::all_of(t.begin(), t.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      });
      w->transports.push_back(word ? t : "?");
    }
  }
  // Untrusted too: printable ASCII, at most 64 characters.
  if (!r.device().empty()) {
    std::string device = r.device().substr(0, 64);
    for (char& c : device) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    w->device = std::move(device);
  }
  for (const proto::MetricPoint& p : r.metrics()) {
    if (p.values().empty()) continue;
    for (const auto& [name, value] : p.values()) w->metrics[name] = value;  // the latest of each
    w->metrics_clock = std::max(w->metrics_clock, p.clock());
    curve_.push_back(
        {w->info.rank(), p.clock(), now - start_, {p.values().begin(), p.values().end()}});
    if (curve_.size() > options_.curve_points) {  // keep every other point: the shape stays
      std::vector<CurvePoint> kept;
      for (size_t i = 0; i < curve_.size(); i += 2) kept.push_back(std::move(curve_[i]));
      curve_ = std::move(kept);
    }
  }
}

void ClusterStats::OnServerReport(int32_t id, const proto::ServerReport& r, double now) {
  ServerRecord* s = Server(id);
  if (s == nullptr || s->state != "alive") return;
  const double dt = s->last_report >= 0 ? now - s->last_report : 0;
  if (dt > 0) {
    const int64_t before = s->report.pushes() + s->report.pulls();
    const int64_t after = r.pushes() + r.pulls();
    s->requests_per_s = Ewma(s->requests_per_s, std::max<int64_t>(0, after - before) / dt);
  }
  for (const proto::LayerReport& l : r.layers()) {
    LayerRecord& rec = s->layers[l.layer()];
    if (dt > 0) {
      const int64_t delta = std::max<int64_t>(0, l.pushes() - rec.totals.pushes());
      rec.per_minute = Ewma(rec.per_minute, 60.0 * delta / dt);
    }
    rec.totals = l;
  }
  s->report = r;
  s->last_heard = s->last_report = now;
}

StragglerDetector::Workers ClusterStats::LiveStragglerStates() {
  StragglerDetector::Workers live;
  for (auto& [id, w] : workers_) {
    if (w.state == "alive") live.push_back(&w.straggler);
  }
  return live;
}

bool ClusterStats::Update(double now) {
  const bool changed = detector_.Update(LiveStragglerStates());
  if (history_t_.empty() || now - history_t_.back() >= options_.history_every_s) {
    history_t_.push_back(now - std::max(start_, 0.0));
    for (auto& [id, w] : workers_) {
      w.clock_history.resize(history_t_.size() - 1, w.clock);  // a worker that joined late
      w.clock_history.push_back(w.clock);
    }
    if (history_t_.size() > options_.history_points) {
      history_t_.erase(history_t_.begin());
      for (auto& [id, w] : workers_) w.clock_history.erase(w.clock_history.begin());
    }
  }
  return changed;
}

std::vector<int32_t> ClusterStats::Stragglers() const {
  std::vector<int32_t> ids;
  for (const auto& [id, w] : workers_) {
    if (w.state == "alive" && w.straggler.flagged()) ids.push_back(id);
  }
  return ids;
}

const StragglerState* ClusterStats::Straggler(int32_t id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second.straggler;
}

double ClusterStats::StragglerReference(int32_t id) const {
  const StragglerState* w = Straggler(id);
  if (w == nullptr) return -1;
  StragglerDetector::ConstWorkers live;
  for (const auto& [other, record] : workers_) {
    if (record.state == "alive") live.push_back(&record.straggler);
  }
  return StragglerDetector::Reference(*w, live);
}

int64_t ClusterStats::MaxClock() const {
  int64_t clock = 0;
  for (const auto& [id, w] : workers_) {
    if (w.state == "alive") clock = std::max(clock, w.clock);
  }
  return clock;
}

void ClusterStats::OnCheckpoint(int64_t clock, const std::string& dir, int64_t bytes,
                                double seconds, double now) {
  checkpoint_ = CheckpointRecord{clock, dir, bytes, seconds, now};
}

int64_t ClusterStats::Quorum() const {
  std::vector<double> ewmas;
  int64_t live = 0;
  for (const auto& [id, w] : workers_) {
    if (w.state != "alive") continue;
    ++live;
    if (w.straggler.ewma_ms >= 0) ewmas.push_back(w.straggler.ewma_ms);
  }
  if (static_cast<int64_t>(ewmas.size()) < live) return std::max<int64_t>(1, live);
  return std::max<int64_t>(1, AutoQuorum(std::move(ewmas)));
}

std::map<int32_t, ClusterStats::LayerRecord> ClusterStats::Layers() const {
  std::map<int32_t, LayerRecord> sum;
  for (const auto& [id, s] : servers_) {
    for (const auto& [layer, rec] : s.layers) {
      LayerRecord& out = sum[layer];
      out.totals.set_layer(layer);
      out.totals.set_pushes(out.totals.pushes() + rec.totals.pushes());
      out.totals.set_bytes(out.totals.bytes() + rec.totals.bytes());
      out.totals.set_staleness_sum(out.totals.staleness_sum() + rec.totals.staleness_sum());
      out.totals.set_max_staleness(
          std::max(out.totals.max_staleness(), rec.totals.max_staleness()));
      out.per_minute = std::max(out.per_minute, 0.0) + std::max(rec.per_minute, 0.0);
    }
  }
  return sum;
}

std::vector<int64_t> ClusterStats::StalenessTotals() const {
  std::vector<int64_t> total(kStalenessBuckets, 0);
  for (const auto& [id, w] : workers_) {
    for (int i = 0; i < kStalenessBuckets; ++i) total[i] += w.staleness[i];
  }
  return total;
}

nlohmann::json ClusterStats::WorkersJson(double now) const {
  Json workers = Json::array();
  for (const auto& [id, w] : workers_) {
    const StragglerState& d = w.straggler;
    Json metrics = Json::object();
    for (const auto& [k, v] : w.metrics) metrics[k] = std::isfinite(v) ? Json(v) : Json(nullptr);
    workers.push_back({
        {"id", id},
        {"rank", w.info.rank()},
        {"host", w.info.host()},
        {"pid", w.info.pid()},
        {"state", w.state},
        {"clock", w.clock},
        {"iterations", d.iterations},
        {"iteration_ms", d.ewma_ms >= 0 ? Json(d.ewma_ms) : Json(nullptr)},
        {"iteration_ms_stddev", std::sqrt(d.var_ms2)},
        {"busy_ms", d.busy_ms},
        {"wait_ms", w.wait_ewma_ms >= 0 ? Json(w.wait_ewma_ms) : Json(nullptr)},
        {"staleness", MeanOf(w.staleness)},
        {"staleness_max", MaxOf(w.staleness)},
        {"straggler", d.flagged()},
        {"straggler_reason", d.Reason()},
        {"times_flagged", d.times_flagged},
        {"bytes_pushed", w.bytes_pushed},
        {"raw_bytes_pushed", w.raw_bytes_pushed},
        {"bytes_pulled", w.bytes_pulled},
        {"co_located_bytes", w.co_located_bytes},
        {"transports", w.transports},
        {"device", w.device},
        {"heartbeat_age_ms", std::max(0.0, (now - w.last_heard) * 1000.0)},
        {"metrics", metrics},
        {"metrics_clock", w.metrics_clock},
    });
  }
  return workers;
}

namespace {

// A server's sparse tables: rows, memory and the counts of its TableReport.
nlohmann::json TablesJson(const proto::ServerReport& r) {
  nlohmann::json tables = nlohmann::json::array();
  for (const proto::TableReport& t : r.tables()) {
    tables.push_back({{"name", t.name()},
                      {"rows", t.rows()},
                      {"bytes", t.bytes()},
                      {"row_bytes", t.row_bytes()},
                      {"bytes_per_row", t.rows() ? static_cast<double>(t.bytes()) / t.rows() : 0.0},
                      {"hits", t.hits()},
                      {"misses", t.misses()},
                      {"created", t.created()},
                      {"evicted", t.evicted()},
                      {"expired", t.expired()},
                      {"admitted", t.admitted()},
                      {"dropped", t.dropped()},
                      {"refused", t.refused()}});
  }
  return tables;
}

}  // namespace

nlohmann::json ClusterStats::ServersJson(double now) const {
  Json servers = Json::array();
  for (const auto& [id, s] : servers_) {
    servers.push_back({
        {"id", id},
        {"rank", s.info.rank()},
        {"address", s.info.address()},
        {"host", s.info.host()},
        {"pid", s.info.pid()},
        {"state", s.state},
        {"consistency", s.report.consistency()},
        {"partitions", s.report.partitions()},
        {"bytes_held", s.report.bytes_held()},
        {"pushes", s.report.pushes()},
        {"pulls", s.report.pulls()},
        {"errors", s.report.errors()},
        {"requests_per_s", std::max(s.requests_per_s, 0.0)},
        {"parked_pulls", s.report.parked_pulls()},
        {"parked_clocks", s.report.parked_clocks()},
        {"heartbeat_age_ms", std::max(0.0, (now - s.last_heard) * 1000.0)},
        {"tables", TablesJson(s.report)},
    });
  }
  return servers;
}

nlohmann::json ClusterStats::LayersJson() const {
  Json layers = Json::array();
  for (const auto& [layer, rec] : Layers()) {
    const proto::LayerReport& t = rec.totals;
    layers.push_back({
        {"layer", layer},
        {"pushes", t.pushes()},
        {"pushes_per_min", std::max(rec.per_minute, 0.0)},
        {"bytes", t.bytes()},
        {"mean_staleness", t.pushes() ? static_cast<double>(t.staleness_sum()) / t.pushes() : 0.0},
        {"max_staleness", t.max_staleness()},
    });
  }
  return layers;
}

std::string ClusterStats::StatusJson(double now) const {
  Json j;
  int64_t min_clock = -1, max_clock = 0;
  for (const auto& [id, w] : workers_) {
    if (w.state != "alive") continue;
    min_clock = min_clock < 0 ? w.clock : std::min(min_clock, w.clock);
    max_clock = std::max(max_clock, w.clock);
  }
  std::string consistency;
  for (const auto& [id, s] : servers_) {
    if (consistency.empty() && s.state == "alive") consistency = s.report.consistency();
  }
  Json curve = Json::array();
  for (const CurvePoint& p : curve_) {
    Json point = {{"worker", p.rank}, {"clock", p.clock}, {"time_s", p.time_s}};
    for (const auto& [k, v] : p.metrics) point[k] = std::isfinite(v) ? Json(v) : Json(nullptr);
    curve.push_back(std::move(point));
  }
  Json clocks = Json::object();
  for (const auto& [id, w] : workers_) clocks[std::to_string(w.info.rank())] = w.clock_history;
  j["cluster"] = {
      {"servers", num_servers_},
      {"workers", num_workers_},
      {"uptime_s", start_ < 0 ? 0.0 : now - start_},
      {"consistency", consistency},
      {"min_clock", std::max<int64_t>(min_clock, 0)},
      {"max_clock", max_clock},
      {"quorum", Quorum()},
      {"stragglers", Stragglers()},
      {"straggler_factor", options_.straggler.factor},
  };
  j["cluster"]["checkpoint"] = checkpoint_ ? Json{{"clock", checkpoint_->clock},
                                                  {"dir", checkpoint_->dir},
                                                  {"bytes", checkpoint_->bytes},
                                                  {"write_s", checkpoint_->seconds},
                                                  {"age_s", now - checkpoint_->at}}
                                           : Json(nullptr);
  j["federated"] = federated_.empty() ? Json(nullptr) : Json::parse(federated_);
  if (!virtual_.empty()) j["virtual"] = Json::parse(virtual_);
  j["workers"] = WorkersJson(now);
  j["servers"] = ServersJson(now);
  j["aggregators"] = AggregatorsJson(now);
  j["layers"] = LayersJson();
  if (planner_ != nullptr) j["layer_schedule"] = planner_->Json();
  std::vector<int64_t> staleness = StalenessTotals();
  while (staleness.size() > 1 && staleness.back() == 0) staleness.pop_back();
  j["staleness_histogram"] = {{"counts", staleness},
                              {"last_bucket_open", staleness.size() == kStalenessBuckets}};
  j["curve"] = std::move(curve);
  j["history"] = {{"t", history_t_}, {"clock", clocks}};
  return j.dump();
}

}  // namespace hetps
