// ClusterStats of the aggregation tier (docs/aggregation-tier.md): each aggregator's totals as
// its heartbeats report them, in /api/status ("aggregators") and /metrics (hetps_aggregator_*).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <tuple>

#include "scheduler/cluster_stats.h"
#include "scheduler/prometheus.h"

namespace hetps {

namespace {

using Json = nlohmann::json;

std::string AggregatorLabels(const proto::NodeInfo& n) {
  return fmt::format("aggregator=\"{}\",node=\"{}\"", n.rank(), n.id());
}

}  // namespace

void ClusterStats::OnAggregatorReport(int32_t id, const proto::AggregatorReport& r, double now) {
  auto it = aggregators_.find(id);
  if (it == aggregators_.end() || it->second.state != "alive") return;
  it->second.last_heard = now;
  it->second.report = r;
}

Json ClusterStats::AggregatorsJson(double now) const {
  Json out = Json::array();
  for (const auto& [id, a] : aggregators_) {
    const proto::AggregatorReport& r = a.report;
    out.push_back({
        {"id", id},
        {"rank", a.info.rank()},
        {"address", a.info.address()},
        {"host", a.info.host()},
        {"pid", a.info.pid()},
        {"state", a.state},
        {"group", r.group()},
        {"pushes", r.pushes()},
        {"sums", r.sums()},
        {"bytes_in", r.bytes_in()},
        {"bytes_up", r.bytes_up()},
        {"pulls", r.pulls()},
        {"pulls_up", r.pulls_up()},
        {"open_sums", r.open_sums()},
        {"refused", r.refused()},
        {"server_errors", r.server_errors()},
        {"switch_chunk", a.info.switch_spec().chunk()},
        {"chunks", r.chunks()},
        {"slot_bytes", r.slot_bytes()},
        {"peak_slot_bytes", r.peak_slot_bytes()},
        {"heartbeat_age_ms", std::max(0.0, (now - a.last_heard) * 1000.0)},
    });
  }
  return out;
}

void ClusterStats::AggregatorMetrics(Exposition& e) const {
  if (aggregators_.empty()) return;
  e.Family("hetps_aggregator_up", "gauge", "1 while the aggregator is alive.");
  for (const auto& [id, a] : aggregators_) {
    e.Sample("hetps_aggregator_up", AggregatorLabels(a.info), a.state == "alive");
  }
  using Value = int64_t (proto::AggregatorReport::*)() const;
  const std::tuple<const char*, const char*, const char*, Value> values[] = {
      {"hetps_aggregator_pushes_total", "counter", "Workers' pushes summed.",
       &proto::AggregatorReport::pushes},
      {"hetps_aggregator_sums_total", "counter", "Sums sent to the servers.",
       &proto::AggregatorReport::sums},
      {"hetps_aggregator_bytes_in_total", "counter", "Payload bytes of the workers' pushes.",
       &proto::AggregatorReport::bytes_in},
      {"hetps_aggregator_bytes_up_total", "counter", "Payload bytes of the sums.",
       &proto::AggregatorReport::bytes_up},
      {"hetps_aggregator_pulls_total", "counter", "Workers' pulls answered.",
       &proto::AggregatorReport::pulls},
      {"hetps_aggregator_pulls_up_total", "counter", "Pulls sent to the servers for them.",
       &proto::AggregatorReport::pulls_up},
      {"hetps_aggregator_refused_total", "counter", "Requests the aggregator refused.",
       &proto::AggregatorReport::refused},
      {"hetps_aggregator_server_errors_total", "counter",
       "Sums the servers refused (their workers pushed directly).",
       &proto::AggregatorReport::server_errors},
      {"hetps_aggregator_open_sums", "gauge", "Sums waiting for their group.",
       &proto::AggregatorReport::open_sums},
      {"hetps_aggregator_chunks_total", "counter", "Switch emulation: chunks summed.",
       &proto::AggregatorReport::chunks},
      {"hetps_aggregator_slot_bytes", "gauge",
       "Switch emulation: bytes the aggregation slots hold now.",
       &proto::AggregatorReport::slot_bytes},
  };
  for (const auto& [name, type, help, value] : values) {
    e.Family(name, type, help);
    for (const auto& [id, a] : aggregators_) {
      e.Sample(name, AggregatorLabels(a.info), static_cast<double>((a.report.*value)()));
    }
  }
}

}  // namespace hetps
