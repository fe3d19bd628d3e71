#include "scheduler/cluster_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/quorum.h"

namespace hetps {
namespace {

using Json = nlohmann::json;

// Upper bounds of the staleness histogram in /metrics (exact counts stay in /api/status).
const std::vector<double> kStalenessBounds = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32};

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

std::string WorkerLabels(const proto::NodeInfo& n) {
  return fmt::format("worker=\"{}\",node=\"{}\"", n.rank(), n.id());
}
std::string ServerLabels(const proto::NodeInfo& n) {
  return fmt::format("server=\"{}\",node=\"{}\"", n.rank(), n.id());
}

}  // namespace

// Prometheus text exposition: one family at a time, HELP and TYPE first.
class Exposition {
 public:
  void Family(const std::string& name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(const std::string& name, const std::string& labels, double value) {
    std::string v;
    if (std::isnan(value)) {
      v = "NaN";
    } else if (std::isinf(value)) {
      v = value > 0 ? "+Inf" : "-Inf";
    } else {
      v = fmt::format("{}", value);
    }
    out_ += labels.empty() ? fmt::format("{} {}\n", name, v)
                           : fmt::format("{}{{{}}} {}\n", name, labels, v);
  }
  void Histo(const std::string& name, const std::string& labels, const Histogram& h) {
    int64_t cumulative = 0;
    const std::string sep = labels.empty() ? "" : labels + ",";
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      cumulative += h.counts()[i];
      Sample(name + "_bucket", fmt::format("{}le=\"{}\"", sep, h.bounds()[i]),
             static_cast<double>(cumulative));
    }
    Sample(name + "_bucket", sep + "le=\"+Inf\"", static_cast<double>(h.count()));
    Sample(name + "_sum", labels, h.sum());
    Sample(name + "_count", labels, static_cast<double>(h.count()));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

void Histogram::Add(double v, int64_t n) {
  if (n <= 0) return;
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i] += n;
  count_ += n;
  sum_ += v * static_cast<double>(n);
}

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
    detector_.AddWorker(node.id());
  } else if (node.role() == proto::SERVER) {
    ServerRecord& s = servers_[node.id()];
    s.info = node;
    s.last_heard = now;
  }
}

void ClusterStats::OnHeard(int32_t id, double now) {
  if (WorkerRecord* w = Worker(id)) w->last_heard = now;
  if (ServerRecord* s = Server(id)) s->last_heard = now;
}

void ClusterStats::OnLeft(int32_t id, double now) {
  OnHeard(id, now);
  if (WorkerRecord* w = Worker(id)) w->state = "left";
  if (ServerRecord* s = Server(id)) s->state = "left";
  detector_.RemoveWorker(id);
}

void ClusterStats::OnDead(int32_t id, double) {
  if (WorkerRecord* w = Worker(id)) w->state = "dead";
  if (ServerRecord* s = Server(id)) s->state = "dead";
  detector_.RemoveWorker(id);
}

void ClusterStats::OnWorkerReport(int32_t id, const proto::WorkerReport& r, double now) {
  WorkerRecord* w = Worker(id);
  if (w == nullptr || w->state != "alive") return;
  w->last_heard = now;
  w->clock = std::max(w->clock, r.clock());
  for (double ms : r.iteration_ms()) {
    if (!(ms >= 0) || !std::isfinite(ms)) continue;  // a confused worker skews nothing
    w->iteration.Add(ms / 1000.0);
    detector_.OnIteration(id, ms);
  }
  for (double ms : r.wait_ms()) {
    if (!(ms >= 0) || !std::isfinite(ms)) continue;
    w->wait_ewma_ms = Ewma(w->wait_ewma_ms, ms);
    w->wait_total_ms += ms;
  }
  detector_.SetBusy(id, r.busy_ms());
  for (int i = 0; i < r.staleness_counts_size(); ++i) {
    const size_t bucket = std::min<size_t>(i, kStalenessBuckets - 1);
    w->staleness[bucket] += std::max<int64_t>(0, r.staleness_counts(i));
  }
  w->bytes_pushed = std::max(w->bytes_pushed, r.bytes_pushed());
  w->raw_bytes_pushed = std::max(w->raw_bytes_pushed, r.raw_bytes_pushed());
  w->bytes_pulled = std::max(w->bytes_pulled, r.bytes_pulled());
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

bool ClusterStats::Update(double now) {
  const bool changed = detector_.Update();
  if (history_t_.empty() || now - history_t_.back() >= options_.history_every_s) {
    history_t_.push_back(now - std::max(start_, 0.0));
    for (const auto& [id, w] : workers_) {
      std::vector<int64_t>& series = history_clock_[w.info.rank()];
      series.resize(history_t_.size() - 1, w.clock);  // a worker that joined late
      series.push_back(w.clock);
    }
    if (history_t_.size() > options_.history_points) {
      history_t_.erase(history_t_.begin());
      for (auto& [rank, series] : history_clock_) series.erase(series.begin());
    }
  }
  return changed;
}

int64_t ClusterStats::Quorum() const {
  std::vector<double> ewmas;
  int64_t live = 0;
  for (const auto& [id, w] : workers_) {
    if (w.state != "alive") continue;
    ++live;
    auto it = detector_.workers().find(id);
    if (it != detector_.workers().end() && it->second.ewma_ms >= 0) {
      ewmas.push_back(it->second.ewma_ms);
    }
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
    const StragglerDetector::Worker* d = nullptr;
    if (auto it = detector_.workers().find(id); it != detector_.workers().end()) d = &it->second;
    Json metrics = Json::object();
    for (const auto& [k, v] : w.metrics) metrics[k] = std::isfinite(v) ? Json(v) : Json(nullptr);
    workers.push_back({
        {"id", id},
        {"rank", w.info.rank()},
        {"host", w.info.host()},
        {"pid", w.info.pid()},
        {"state", w.state},
        {"clock", w.clock},
        {"iterations", d ? d->iterations : 0},
        {"iteration_ms", d && d->ewma_ms >= 0 ? Json(d->ewma_ms) : Json(nullptr)},
        {"iteration_ms_stddev", d ? std::sqrt(d->var_ms2) : 0.0},
        {"busy_ms", d ? d->busy_ms : 0.0},
        {"wait_ms", w.wait_ewma_ms >= 0 ? Json(w.wait_ewma_ms) : Json(nullptr)},
        {"staleness", MeanOf(w.staleness)},
        {"staleness_max", MaxOf(w.staleness)},
        {"straggler", d != nullptr && d->flagged()},
        {"straggler_reason", detector_.Reason(id)},
        {"times_flagged", d ? d->times_flagged : 0},
        {"bytes_pushed", w.bytes_pushed},
        {"raw_bytes_pushed", w.raw_bytes_pushed},
        {"bytes_pulled", w.bytes_pulled},
        {"heartbeat_age_ms", std::max(0.0, (now - w.last_heard) * 1000.0)},
        {"metrics", metrics},
        {"metrics_clock", w.metrics_clock},
    });
  }
  return workers;
}

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
  for (const auto& [rank, series] : history_clock_) clocks[std::to_string(rank)] = series;
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
  j["workers"] = WorkersJson(now);
  j["servers"] = ServersJson(now);
  j["layers"] = LayersJson();
  std::vector<int64_t> staleness = StalenessTotals();
  while (staleness.size() > 1 && staleness.back() == 0) staleness.pop_back();
  j["staleness_histogram"] = {{"counts", staleness},
                              {"last_bucket_open", staleness.size() == kStalenessBuckets}};
  j["curve"] = std::move(curve);
  j["history"] = {{"t", history_t_}, {"clock", clocks}};
  return j.dump();
}

std::string ClusterStats::Metrics(double now) const {
  Exposition e;
  e.Family("hetps_cluster_workers", "gauge", "Workers by state.");
  for (const char* state : {"alive", "left", "dead"}) {
    int n = 0;
    for (const auto& [id, w] : workers_) n += w.state == state;
    e.Sample("hetps_cluster_workers", fmt::format("state=\"{}\"", state), n);
  }
  e.Family("hetps_cluster_quorum", "gauge",
           "The automatic quorum: K maximizing K / (K-th smallest iteration time).");
  e.Sample("hetps_cluster_quorum", "", static_cast<double>(Quorum()));

  WorkerMetrics(e, now);
  ServerMetrics(e);
  LayerMetrics(e);
  return e.Take();
}

void ClusterStats::WorkerMetrics(Exposition& e, double now) const {
  e.Family("hetps_worker_clock", "gauge", "Clocks (iterations) the worker has finished.");
  for (const auto& [id, w] : workers_) {
    e.Sample("hetps_worker_clock", WorkerLabels(w.info), static_cast<double>(w.clock));
  }
  e.Family("hetps_worker_up", "gauge", "1 while the worker is alive, 0 once it left or died.");
  for (const auto& [id, w] : workers_) {
    e.Sample("hetps_worker_up", WorkerLabels(w.info), w.state == "alive");
  }
  e.Family("hetps_worker_straggler", "gauge",
           "1 while the worker is flagged as a straggler (slow or late).");
  for (const auto& [id, w] : workers_) {
    auto it = detector_.workers().find(id);
    const bool flagged = it != detector_.workers().end() && it->second.flagged();
    e.Sample("hetps_worker_straggler", WorkerLabels(w.info), flagged);
  }
  e.Family("hetps_worker_straggler_flags_total", "counter",
           "Times the worker went from clear to flagged.");
  for (const auto& [id, w] : workers_) {
    auto it = detector_.workers().find(id);
    e.Sample("hetps_worker_straggler_flags_total", WorkerLabels(w.info),
             it == detector_.workers().end() ? 0.0 : it->second.times_flagged);
  }
  e.Family("hetps_worker_iteration_seconds", "histogram",
           "Iteration time outside Clock(): compute and transfers, not the consistency gate.");
  for (const auto& [id, w] : workers_) {
    e.Histo("hetps_worker_iteration_seconds", WorkerLabels(w.info), w.iteration);
  }
  e.Family("hetps_worker_iteration_ewma_seconds", "gauge",
           "EWMA (beta 0.5) of the iteration time, what straggler detection compares.");
  for (const auto& [id, w] : workers_) {
    auto it = detector_.workers().find(id);
    if (it == detector_.workers().end() || it->second.ewma_ms < 0) continue;
    e.Sample("hetps_worker_iteration_ewma_seconds", WorkerLabels(w.info),
             it->second.ewma_ms / 1000.0);
  }
  e.Family("hetps_worker_gate_wait_seconds_total", "counter",
           "Time spent blocked in Clock() by the consistency gate.");
  for (const auto& [id, w] : workers_) {
    e.Sample("hetps_worker_gate_wait_seconds_total", WorkerLabels(w.info),
             w.wait_total_ms / 1000.0);
  }
  e.Family("hetps_worker_push_staleness", "histogram",
           "Push staleness: server versions applied between the pull and the push.");
  for (const auto& [id, w] : workers_) {
    Histogram h(kStalenessBounds);
    for (int i = 0; i < kStalenessBuckets; ++i) h.Add(i, w.staleness[i]);
    e.Histo("hetps_worker_push_staleness", WorkerLabels(w.info), h);
  }
  const std::pair<const char*, int64_t WorkerRecord::*> bytes[] = {
      {"hetps_worker_pushed_bytes_total", &WorkerRecord::bytes_pushed},
      {"hetps_worker_pushed_uncompressed_bytes_total", &WorkerRecord::raw_bytes_pushed},
      {"hetps_worker_pulled_bytes_total", &WorkerRecord::bytes_pulled}};
  for (const auto& [name, field] : bytes) {
    e.Family(name, "counter", "Payload bytes (pushed: as sent; uncompressed: as float32).");
    for (const auto& [id, w] : workers_) {
      e.Sample(name, WorkerLabels(w.info), static_cast<double>(w.*field));
    }
  }
  e.Family("hetps_worker_heartbeat_age_seconds", "gauge", "Time since the worker was heard.");
  for (const auto& [id, w] : workers_) {
    e.Sample("hetps_worker_heartbeat_age_seconds", WorkerLabels(w.info),
             std::max(0.0, now - w.last_heard));
  }
  e.Family("hetps_worker_train_loss", "gauge", "The trainer's latest training loss.");
  for (const auto& [id, w] : workers_) {
    if (auto it = w.metrics.find("loss"); it != w.metrics.end()) {
      e.Sample("hetps_worker_train_loss", WorkerLabels(w.info), it->second);
    }
  }
  e.Family("hetps_worker_test_accuracy_ratio", "gauge", "The trainer's latest test accuracy.");
  for (const auto& [id, w] : workers_) {
    if (auto it = w.metrics.find("accuracy"); it != w.metrics.end()) {
      e.Sample("hetps_worker_test_accuracy_ratio", WorkerLabels(w.info), it->second);
    }
  }
}

void ClusterStats::ServerMetrics(Exposition& e) const {
  e.Family("hetps_server_up", "gauge", "1 while the server is alive.");
  for (const auto& [id, s] : servers_) {
    e.Sample("hetps_server_up", ServerLabels(s.info), s.state == "alive");
  }
  using ServerValue = double (*)(const ServerRecord&);
  const std::tuple<const char*, const char*, ServerValue> server_values[] = {
      {"hetps_server_partitions", "gauge Partitions the server holds.",
       [](const ServerRecord& s) { return 1.0 * s.report.partitions(); }},
      {"hetps_server_held_bytes", "gauge Parameter bytes the server holds.",
       [](const ServerRecord& s) { return 1.0 * s.report.bytes_held(); }},
      {"hetps_server_parked_pulls", "gauge Pulls waiting for the consistency rule.",
       [](const ServerRecord& s) { return 1.0 * s.report.parked_pulls(); }},
      {"hetps_server_parked_clocks", "gauge Workers waiting at the consistency gate.",
       [](const ServerRecord& s) { return 1.0 * s.report.parked_clocks(); }},
      {"hetps_server_requests_per_second", "gauge Pushes and pulls served per second.",
       [](const ServerRecord& s) { return std::max(s.requests_per_s, 0.0); }},
      {"hetps_server_pushes_total", "counter Pushes served.",
       [](const ServerRecord& s) { return 1.0 * s.report.pushes(); }},
      {"hetps_server_pulls_total", "counter Pulls served.",
       [](const ServerRecord& s) { return 1.0 * s.report.pulls(); }},
      {"hetps_server_errors_total", "counter Requests rejected with an error.",
       [](const ServerRecord& s) { return 1.0 * s.report.errors(); }},
  };
  for (const auto& [name, type_help, value] : server_values) {
    const std::string th = type_help;
    const size_t space = th.find(' ');
    e.Family(name, th.substr(0, space).c_str(), th.substr(space + 1).c_str());
    for (const auto& [id, s] : servers_) e.Sample(name, ServerLabels(s.info), value(s));
  }
}

void ClusterStats::LayerMetrics(Exposition& e) const {
  const auto layers = Layers();
  e.Family("hetps_layer_pushes_total", "counter", "Partition pushes of the layer, all servers.");
  for (const auto& [layer, rec] : layers) {
    e.Sample("hetps_layer_pushes_total", fmt::format("layer=\"{}\"", layer), rec.totals.pushes());
  }
  e.Family("hetps_layer_pushed_bytes_total", "counter", "Payload bytes pushed for the layer.");
  for (const auto& [layer, rec] : layers) {
    e.Sample("hetps_layer_pushed_bytes_total", fmt::format("layer=\"{}\"", layer),
             rec.totals.bytes());
  }
  e.Family("hetps_layer_push_rate_per_minute", "gauge",
           "Partition pushes of the layer per minute.");
  for (const auto& [layer, rec] : layers) {
    e.Sample("hetps_layer_push_rate_per_minute", fmt::format("layer=\"{}\"", layer),
             std::max(rec.per_minute, 0.0));
  }
  e.Family("hetps_layer_push_staleness_mean", "gauge", "Mean push staleness of the layer.");
  for (const auto& [layer, rec] : layers) {
    const proto::LayerReport& t = rec.totals;
    e.Sample("hetps_layer_push_staleness_mean", fmt::format("layer=\"{}\"", layer),
             t.pushes() ? static_cast<double>(t.staleness_sum()) / t.pushes() : 0.0);
  }
}

}  // namespace hetps
