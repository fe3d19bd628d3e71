// ServerHost: the servers' emulated host for benchmarks (hetps-bench aggregation, train
// --links=netns): a network namespace behind a bridge, its link limited to a rate each way (tc
// tbf), so the workers on this host reach the servers as over a NIC of that rate. The bridge
// holds 10.204.0.1 (where the scheduler binds), the namespace 10.204.0.10 (the servers). Names
// carry this process's pid; everything is removed when the object goes. Needs root (ip, tc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace hetps {
struct LocalClusterOptions;
}

namespace hetps::bench {

class ServerHost {
 public:
  static StatusOr<std::unique_ptr<ServerHost>> Create(double mbps);
  // For a benchmark's --links: "netns" creates one (and lets the daemons listen on its bridge
  // without keys, HETPS_INSECURE), "none" gives null.
  static StatusOr<std::unique_ptr<ServerHost>> ForLinks(const std::string& links, double mbps);
  // Puts the cluster's servers on this host and its scheduler on the bridge.
  void Place(LocalClusterOptions& cluster) const;
  ~ServerHost();
  ServerHost(const ServerHost&) = delete;
  ServerHost& operator=(const ServerHost&) = delete;

  const std::string& ns() const { return ns_; }
  static constexpr const char* kSchedulerBind = "tcp://10.204.0.1:*";
  static constexpr const char* kServerBind = "tcp://10.204.0.10:*";
  // Bytes sent so far towards the servers (pushes) and from them (pulls), as tc counted them;
  // -1 when tc could not say.
  int64_t BytesToServer() const;
  int64_t BytesFromServer() const;

 private:
  ServerHost() = default;
  std::string ns_, bridge_, veth_;
};

}  // namespace hetps::bench
