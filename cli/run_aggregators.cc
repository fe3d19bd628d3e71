#include "cli/run_aggregators.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

namespace hetps {
namespace {

// The hosts that run workers, in the order their first worker comes.
std::vector<int> WorkerHosts(const Placement& p) {
  std::vector<int> hosts;
  for (int h : p.workers) {
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  return hosts;
}

}  // namespace

int AggregatorHost(const Placement& placement, int index) {
  return WorkerHosts(placement).at(static_cast<size_t>(index));
}

StatusOr<int> SetUpAggregators(const LaunchArgs& args,
                               const std::map<std::string, std::vector<std::string>>& routed,
                               LocalClusterOptions& cluster) {
  const std::string value = LastFlagValue(routed.at("scheduler"), "aggregators");
  const int n = value.empty() ? 0 : std::atoi(value.c_str());
  if (n <= 0) return 0;
  if (args.links == "netns") {
    return Status::InvalidArgument(
        "--aggregators are host-local, and with --links=netns every client is a host of its "
        "own: run them without --links=netns");
  }
  cluster.aggregators = n;
  cluster.aggregator_flags = routed.at("aggregator");
  if (args.hosts.empty()) return n;
  auto placement = PlaceOnHosts(args.hosts, args.servers, args.workers);
  if (!placement.ok()) return placement.status();
  const std::vector<int> hosts = WorkerHosts(*placement);
  if (static_cast<int>(hosts.size()) < n) {
    return Status::InvalidArgument(fmt::format(
        "--aggregators={} are host-local, but only {} host(s) run workers", n, hosts.size()));
  }
  for (int i = 0; i < n; ++i) {
    cluster.aggregator_own_flags.push_back(
        {"--bind=tcp://*:*", fmt::format("--advertise=tcp://{}:*", args.hosts[hosts[i]].address)});
  }
  return n;
}

}  // namespace hetps
