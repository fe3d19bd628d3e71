// ServerHost: the servers' emulated host for benchmarks (hetps-bench aggregation, train
// --links=netns): a network namespace behind a bridge, its link limited to a rate each way (tc
// tbf), so the workers on this host reach the servers as over a NIC of that rate. The bridge
// holds 10.204.0.1 (where the scheduler binds), the namespace 10.204.0.10 (the servers).
// AddWorkerHosts gives each worker a namespace of its own behind the bridge on a link of the
// same rate (10.204.0.20 + i), which a benchmark's thread enters (EnterWorkerHost) before it
// connects: the bridge is then the switch between the workers and the servers. Names carry
// this process's pid; everything is removed when the object goes. Needs root (ip, tc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

  // One namespace per worker, each on its own link of the host's rate.
  Status AddWorkerHosts(int n);
  // Moves the calling thread (and the threads it starts: a client's sockets) into worker
  // host i's network namespace.
  Status EnterWorkerHost(int i) const;
  int worker_hosts() const { return static_cast<int>(worker_ns_.size()); }

  const std::string& ns() const { return ns_; }
  static constexpr const char* kSchedulerBind = "tcp://10.204.0.1:*";
  static constexpr const char* kServerBind = "tcp://10.204.0.10:*";
  static constexpr const char* kBridgeBind = "--bind=tcp://10.204.0.1:*";  // a daemon's flag
  // Bytes sent so far towards the servers (pushes) and from them (pulls), as tc counted them;
  // -1 when tc could not say.
  int64_t BytesToServer() const;
  int64_t BytesFromServer() const;

 private:
  ServerHost() = default;
  std::string ns_, bridge_, veth_, rate_;
  std::vector<std::string> worker_ns_;
};

}  // namespace hetps::bench
