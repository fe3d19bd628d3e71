// ClusterStats: the scheduler's live picture of a run, built from the reports that ride on
// every node's heartbeat (no extra message on the data path), and rendered for people and
// tools: /api/status JSON, /metrics in the Prometheus text format, and the policy hints
// (straggler flags, quorum) the scheduler pushes to the servers.
//
// Per worker: clock, iteration time (EWMA, deviation, histogram), time waiting at the gate,
// push staleness (histogram of server version at apply minus base version), bytes, last
// heartbeat, straggler flags (scheduler/straggler.h) and the trainer's loss/accuracy. Per
// server: partitions, bytes held, requests per second, parked pulls and clocks. Per layer:
// pushes (total and per minute), bytes, mean and max staleness, summed over the servers.
//
// Time is passed in (seconds on any monotonic origin), so tests drive it by hand.
// Thread-safety: none; owned by the scheduler's loop thread, which publishes the rendered text.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hetps.pb.h"
#include "scheduler/prometheus.h"
#include "scheduler/straggler.h"

namespace hetps {

class Exposition;    // Prometheus text being written (prometheus.h)
class LayerPlanner;  // scheduler/layer_planner.h

// Push staleness is counted exactly up to this value; the last bucket holds it and above.
constexpr int kStalenessBuckets = 33;

struct ClusterStatsOptions {
  StragglerOptions straggler;
  size_t curve_points = 4000;   // loss/accuracy points kept (oldest thinned out first)
  size_t history_points = 900;  // clock samples kept, one per history_every_s
  double history_every_s = 1.0;
};

class ClusterStats {
 public:
  explicit ClusterStats(int num_servers, int num_workers, ClusterStatsOptions options = {});

  void OnJoin(const proto::NodeInfo& node, double now);
  void OnHeard(int32_t id, double now);  // any message from the node
  void OnLeft(int32_t id, double now);
  void OnDead(int32_t id, double now);
  // A server restarted on its data dir took over the rank of the dead `old` one: `old` is
  // "replaced", the new one "recovering" (restoring its shards) until OnServerBack.
  void OnServerRestarted(int32_t id, int32_t old);
  void OnServerBack(int32_t id);
  void OnWorkerReport(int32_t id, const proto::WorkerReport& report, double now);
  void OnServerReport(int32_t id, const proto::ServerReport& report, double now);
  void OnAggregatorReport(int32_t id, const proto::AggregatorReport& report, double now);

  // Recomputes straggler flags and samples the clock history; true when the flags changed.
  bool Update(double now);
  // Ids of the live workers flagged now.
  std::vector<int32_t> Stragglers() const;
  // A worker's timing and flags (null for an unknown id), and what its EWMA is compared with.
  const StragglerState* Straggler(int32_t id) const;
  double StragglerReference(int32_t id) const;
  // The automatic quorum of semi_async rounds: AutoQuorum (common/quorum.h) over the live
  // workers' iteration-time EWMAs; every live worker until each has one.
  int64_t Quorum() const;

  // The furthest clock a live worker reported (0 before any report).
  int64_t MaxClock() const;
  // A whole-run checkpoint completed (scheduler/checkpoints.h): shown in the status.
  // The federated rounds' summary (FedRounds::SummaryJson, JSON text; empty: none), shown as
  // /api/status's "federated".
  void SetFederated(std::string json) { federated_ = std::move(json); }
  // --dp: the epsilon the federated run spent at `delta` (none: no differential privacy).
  void SetPrivacy(std::optional<double> epsilon, double delta) {
    dp_epsilon_ = epsilon;
    dp_delta_ = delta;
  }
  // Under virtual time: the clock's time, the requests it holds and the ranks it waits for
  // (JSON text; empty: wall time), shown as /api/status's "virtual".
  void SetVirtual(std::string json) { virtual_ = std::move(json); }
  // The layer-wise schedule (periods, bytes saved), shown in "layer_schedule" and /metrics.
  void SetLayerPlanner(const LayerPlanner* planner) { planner_ = planner; }
  // What the scheduler itself refused so far (/metrics).
  struct Refused {
    int64_t messages = 0;       // of keys their role does not allow
    int64_t registrations = 0;  // beyond --join_burst / --join_rate
    int64_t connections = 0;    // beyond --max_connections_per_address
  };
  void SetRefused(const Refused& refused) { refused_ = refused; }
  void OnCheckpoint(int64_t clock, const std::string& dir, int64_t bytes, double seconds,
                    double now);

  std::string StatusJson(double now) const;
  std::string Metrics(double now) const;

 private:
  // Everything known about one worker: one record per node id, kept from its join on.
  struct WorkerRecord {
    proto::NodeInfo info;
    std::string state = "alive";
    StragglerState straggler;            // flags only while alive
    std::vector<int64_t> clock_history;  // aligned with history_t_ (padded if it joined late)
    double last_heard = 0;
    int64_t clock = 0;
    double wait_ewma_ms = -1;
    double wait_total_ms = 0;
    Histogram iteration{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
    std::vector<int64_t> staleness = std::vector<int64_t>(kStalenessBuckets, 0);
    int64_t bytes_pushed = 0, raw_bytes_pushed = 0, bytes_pulled = 0, co_located_bytes = 0;
    std::vector<std::string> transports;  // per server rank, as last reported
    std::string device;                   // what it computes on, as last reported
    std::map<std::string, double> metrics;
    int64_t metrics_clock = 0;
  };
  struct LayerRecord {
    proto::LayerReport totals;
    double per_minute = -1;  // EWMA of the rate between reports
  };
  struct ServerRecord {
    proto::NodeInfo info;
    std::string state = "alive";
    double last_heard = 0, last_report = -1;  // last_report: for rates between reports
    proto::ServerReport report;
    double requests_per_s = -1;  // EWMA of pushes + pulls per second; -1: not yet
    std::map<int32_t, LayerRecord> layers;
  };
  struct AggregatorRecord {
    proto::NodeInfo info;
    std::string state = "alive";
    double last_heard = 0;
    proto::AggregatorReport report;
  };
  struct CurvePoint {
    int32_t rank;
    int64_t clock;
    double time_s;
    std::map<std::string, double> metrics;
  };

  nlohmann::json WorkersJson(double now) const;
  nlohmann::json ServersJson(double now) const;
  nlohmann::json LayersJson() const;
  nlohmann::json AggregatorsJson(double now) const;
  void AggregatorMetrics(Exposition& e) const;
  void WorkerMetrics(Exposition& e, double now) const;  // state and timing
  void WorkerTrafficMetrics(Exposition& e) const;       // bytes and trainer figures
  void ServerMetrics(Exposition& e) const;
  void LayerMetrics(Exposition& e) const;
  void TableMetrics(Exposition& e) const;  // per server and sparse table
  WorkerRecord* Worker(int32_t id);
  ServerRecord* Server(int32_t id);
  std::map<int32_t, LayerRecord> Layers() const;  // summed over servers
  std::vector<int64_t> StalenessTotals() const;   // every worker's, exact counts
  StragglerDetector::Workers LiveStragglerStates();

  int num_servers_, num_workers_;
  ClusterStatsOptions options_;
  StragglerDetector detector_;               // the rules; the state is in workers_
  std::map<int32_t, WorkerRecord> workers_;  // by node id
  std::map<int32_t, ServerRecord> servers_;
  std::map<int32_t, AggregatorRecord> aggregators_;
  std::vector<CurvePoint> curve_;
  struct CheckpointRecord {
    int64_t clock = 0;
    std::string dir;
    int64_t bytes = 0;
    double seconds = 0, at = 0;
  };
  std::optional<CheckpointRecord> checkpoint_;  // the last complete one
  std::string federated_;
  std::optional<double> dp_epsilon_;
  double dp_delta_ = 0;
  std::string virtual_;
  const LayerPlanner* planner_ = nullptr;
  Refused refused_;
  std::vector<double> history_t_;
  double start_ = -1;
};

}  // namespace hetps
