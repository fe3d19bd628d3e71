#include "cli/run_replicas.h"

#include <cstdlib>

namespace hetps {
namespace {

// Puts `flag` first among `flags` unless `name` is set there already.
void Default(std::vector<std::string>& flags, const std::string& name, const std::string& flag) {
  if (LastFlagValue(flags, name).empty()) flags.insert(flags.begin(), flag);
}

}  // namespace

StatusOr<int> SetUpReplicas(const LaunchArgs& args,
                            std::map<std::string, std::vector<std::string>>& routed) {
  const std::string value = LastFlagValue(routed.at("scheduler"), "replicas");
  const int replicas = value.empty() ? 0 : std::atoi(value.c_str());
  if (replicas <= 0) return 0;
  if (!args.hosts.empty() || args.links == "netns" || args.max_restarts > 0) {
    return Status::InvalidArgument(
        "--replicas starts its standbys on this host, without -H, --links=netns or --restart "
        "(a failed-over rank is backed up again by a new --standby server)");
  }
  Default(routed.at("scheduler"), "heartbeat_timeout_ms", "--heartbeat_timeout_ms=1000");
  Default(routed.at("server"), "heartbeat_interval_ms", "--heartbeat_interval_ms=200");
  Default(routed.at("worker"), "server_recovery_timeout_ms", "--server_recovery_timeout_ms=30000");
  return replicas * args.servers;
}

}  // namespace hetps
