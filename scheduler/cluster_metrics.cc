// ClusterStats rendered as Prometheus text (/metrics); the JSON status is cluster_stats.cc.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "scheduler/cluster_stats.h"
#include "scheduler/layer_planner.h"
#include "scheduler/prometheus.h"

namespace hetps {
namespace {

// Upper bounds of the staleness histogram in /metrics (exact counts stay in /api/status).
const std::vector<double> kStalenessBounds = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32};

std::string WorkerLabels(const proto::NodeInfo& n) {
  return fmt::format("worker=\"{}\",node=\"{}\"", n.rank(), n.id());
}
std::string ServerLabels(const proto::NodeInfo& n) {
  return fmt::format("server=\"{}\",node=\"{}\"", n.rank(), n.id());
}

// A label value as the exposition format escapes it (a table's name is the user's text).
std::string LabelValue(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

// One family with a sample per worker; `value(record)` returns nullopt to leave a worker out.
template <typename Workers, typename Value>
void PerWorker(Exposition& e, const Workers& workers, const char* name, const char* type,
               const char* help, Value value) {
  e.Family(name, type, help);
  for (const auto& [id, w] : workers) {
    if (std::optional<double> v = value(w)) e.Sample(name, WorkerLabels(w.info), *v);
  }
}

}  // namespace

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
  e.Family("hetps_scheduler_refused_total", "counter",
           "What the scheduler refused: messages from keys not allowed them, registrations and "
           "connections beyond the limits per peer address.");
  e.Sample("hetps_scheduler_refused_total", "what=\"message\"", 1.0 * refused_.messages);
  e.Sample("hetps_scheduler_refused_total", "what=\"registration\"", 1.0 * refused_.registrations);
  e.Sample("hetps_scheduler_refused_total", "what=\"connection\"", 1.0 * refused_.connections);

  if (dp_epsilon_) {
    e.Family("hetps_fed_dp_epsilon", "gauge",
             "The epsilon of (epsilon, delta) differential privacy the federated run spent.");
    e.Sample("hetps_fed_dp_epsilon", fmt::format("delta=\"{:g}\"", dp_delta_), *dp_epsilon_);
  }
  WorkerMetrics(e, now);
  ServerMetrics(e);
  AggregatorMetrics(e);
  LayerMetrics(e);
  if (planner_ != nullptr) planner_->Metrics(e);
  return e.Take();
}

void ClusterStats::WorkerMetrics(Exposition& e, double now) const {
  using Value = std::optional<double>;
  auto per_worker = [&](const char* name, const char* type, const char* help, auto value) {
    PerWorker(e, workers_, name, type, help, value);
  };
  per_worker("hetps_worker_clock", "gauge", "Clocks (iterations) the worker has finished.",
             [](const WorkerRecord& w) -> Value { return w.clock; });
  per_worker("hetps_worker_up", "gauge", "1 while the worker is alive, 0 once it left or died.",
             [](const WorkerRecord& w) -> Value { return w.state == "alive"; });
  per_worker("hetps_worker_straggler", "gauge",
             "1 while the worker is flagged as a straggler (slow or late).",
             [](const WorkerRecord& w) -> Value { return w.straggler.flagged(); });
  per_worker("hetps_worker_straggler_flags_total", "counter",
             "Times the worker went from clear to flagged.",
             [](const WorkerRecord& w) -> Value { return w.straggler.times_flagged; });
  e.Family("hetps_worker_iteration_seconds", "histogram",
           "Iteration time outside Clock(): compute and transfers, not the consistency gate.");
  for (const auto& [id, w] : workers_) {
    e.Histo("hetps_worker_iteration_seconds", WorkerLabels(w.info), w.iteration);
  }
  per_worker("hetps_worker_iteration_ewma_seconds", "gauge",
             "EWMA (beta 0.5) of the iteration time, what straggler detection compares.",
             [](const WorkerRecord& w) -> Value {
               if (w.straggler.ewma_ms < 0) return std::nullopt;
               return w.straggler.ewma_ms / 1000.0;
             });
  per_worker("hetps_worker_gate_wait_seconds_total", "counter",
             "Time spent blocked in Clock() by the consistency gate.",
             [](const WorkerRecord& w) -> Value { return w.wait_total_ms / 1000.0; });
  e.Family("hetps_worker_push_staleness", "histogram",
           "Push staleness: server versions applied between the pull and the push.");
  for (const auto& [id, w] : workers_) {
    Histogram h(kStalenessBounds);
    for (int i = 0; i < kStalenessBuckets; ++i) h.Add(i, w.staleness[i]);
    e.Histo("hetps_worker_push_staleness", WorkerLabels(w.info), h);
  }
  per_worker("hetps_worker_heartbeat_age_seconds", "gauge", "Time since the worker was heard.",
             [now](const WorkerRecord& w) -> Value { return std::max(0.0, now - w.last_heard); });
  WorkerTrafficMetrics(e);
}

void ClusterStats::WorkerTrafficMetrics(Exposition& e) const {
  using Value = std::optional<double>;
  const std::pair<const char*, int64_t WorkerRecord::*> bytes[] = {
      {"hetps_worker_pushed_bytes_total", &WorkerRecord::bytes_pushed},
      {"hetps_worker_pushed_uncompressed_bytes_total", &WorkerRecord::raw_bytes_pushed},
      {"hetps_worker_pulled_bytes_total", &WorkerRecord::bytes_pulled},
      {"hetps_worker_co_located_bytes_total", &WorkerRecord::co_located_bytes}};
  for (const auto& [name, field] : bytes) {
    PerWorker(e, workers_, name, "counter",
              "Payload bytes (pushed: as sent; uncompressed: as float32; co-located: pushed and "
              "pulled through shared memory or cross memory attach).",
              [field](const WorkerRecord& w) -> Value { return w.*field; });
  }
  const struct {
    const char *name, *key, *help;
  } figures[] = {
      {"hetps_worker_train_loss", "loss", "The trainer's latest training loss."},
      {"hetps_worker_test_accuracy_ratio", "accuracy", "The trainer's latest test accuracy."}};
  for (const auto& f : figures) {
    PerWorker(e, workers_, f.name, "gauge", f.help, [&f](const WorkerRecord& w) -> Value {
      auto it = w.metrics.find(f.key);
      if (it == w.metrics.end()) return std::nullopt;
      return it->second;
    });
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
      {"hetps_server_connections_refused_total",
       "counter Connections shut down beyond the limit per peer address.",
       [](const ServerRecord& s) { return 1.0 * s.report.connections_refused(); }},
  };
  for (const auto& [name, type_help, value] : server_values) {
    const std::string th = type_help;
    const size_t space = th.find(' ');
    e.Family(name, th.substr(0, space).c_str(), th.substr(space + 1).c_str());
    for (const auto& [id, s] : servers_) e.Sample(name, ServerLabels(s.info), value(s));
  }
  TableMetrics(e);
}

void ClusterStats::TableMetrics(Exposition& e) const {
  using TableValue = int64_t (proto::TableReport::*)() const;
  const std::tuple<const char*, const char*, TableValue> table_values[] = {
      {"hetps_table_rows", "gauge Rows of the sparse table on the server.",
       &proto::TableReport::rows},
      {"hetps_table_bytes", "gauge Bytes the server holds for the table's rows.",
       &proto::TableReport::bytes},
      {"hetps_table_row_bytes", "gauge One row's own values and optimizer state.",
       &proto::TableReport::row_bytes},
      {"hetps_table_hits_total", "counter Keys pulled that had a row.", &proto::TableReport::hits},
      {"hetps_table_misses_total", "counter Keys pulled without a row (initializer values).",
       &proto::TableReport::misses},
      {"hetps_table_evicted_total", "counter Rows dropped for room.", &proto::TableReport::evicted},
      {"hetps_table_expired_total", "counter Rows dropped by the ttl.",
       &proto::TableReport::expired},
      {"hetps_table_admitted_total", "counter Keys that reached min_count.",
       &proto::TableReport::admitted},
      {"hetps_table_dropped_total", "counter Row gradients dropped before admission.",
       &proto::TableReport::dropped},
  };
  for (const auto& [name, type_help, value] : table_values) {
    const std::string th = type_help;
    const size_t space = th.find(' ');
    e.Family(name, th.substr(0, space).c_str(), th.substr(space + 1).c_str());
    for (const auto& [id, s] : servers_) {
      for (const proto::TableReport& t : s.report.tables()) {
        e.Sample(name, fmt::format("{},table=\"{}\"", ServerLabels(s.info), LabelValue(t.name())),
                 static_cast<double>((t.*value)()));
      }
    }
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
