#include "bench/server_host.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <vector>

#include "common/local_cluster.h"
#include "common/subprocess.h"

namespace hetps::bench {
namespace {

// Runs a command; its output, or an error naming it.
StatusOr<std::string> Run(const std::string& command) {
  auto r = RunCaptured({"/bin/sh", "-c", command + " 2>&1"});
  if (!r.ok()) return r.status();
  if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) {
    return Status::Internal(fmt::format("'{}' failed: {}", command, r->output));
  }
  return r->output;
}

int64_t Sent(const std::string& command) {
  auto out = Run(command);
  std::smatch m;
  if (!out.ok() || !std::regex_search(*out, m, std::regex(R"(Sent (\d+) bytes)"))) return -1;
  return std::stoll(m[1]);
}

}  // namespace

StatusOr<std::unique_ptr<ServerHost>> ServerHost::Create(double mbps) {
  if (geteuid() != 0) return Status::FailedPrecondition("--links=netns needs root (ip, tc)");
  std::unique_ptr<ServerHost> h(new ServerHost());
  const std::string pid = std::to_string(getpid());
  h->ns_ = "hetps-srv-" + pid;
  h->bridge_ = "hsb" + pid;
  h->veth_ = "hsv" + pid;
  const std::string rate = fmt::format("{}mbit", mbps);
  h->rate_ = rate;
  const std::vector<std::string> commands = {
      fmt::format("ip link add {} type bridge", h->bridge_),
      fmt::format("ip addr add 10.204.0.1/24 dev {}", h->bridge_),
      fmt::format("ip link set {} up", h->bridge_), fmt::format("ip netns add {}", h->ns_),
      fmt::format("ip link add {} type veth peer name eth0 netns {}", h->veth_, h->ns_),
      fmt::format("ip link set {} master {} up", h->veth_, h->bridge_),
      fmt::format("ip -n {} addr add 10.204.0.10/24 dev eth0", h->ns_),
      fmt::format("ip -n {} link set eth0 up", h->ns_),
      fmt::format("ip -n {} link set lo up", h->ns_),
      // Towards the servers (the bridge port's egress) and from them (the namespace's).
      fmt::format("tc qdisc add dev {} root tbf rate {} burst 1mbit latency 100ms", h->veth_, rate),
      fmt::format("ip netns exec {} tc qdisc add dev eth0 root tbf rate {} burst 1mbit latency "
                  "100ms",
                  h->ns_, rate)};
  for (const std::string& c : commands) {
    if (auto r = Run(c); !r.ok()) return r.status();  // the destructor removes what was made
  }
  return h;
}

StatusOr<std::unique_ptr<ServerHost>> ServerHost::ForLinks(const std::string& links, double mbps) {
  if (links != "netns") return std::unique_ptr<ServerHost>();
  setenv("HETPS_INSECURE", "true", 1);  // the daemons listen on the bench's own bridge
  return Create(mbps);
}

Status ServerHost::AddWorkerHosts(int n) {
  const std::string pid = std::to_string(getpid());
  for (int i = worker_hosts(); i < n; ++i) {
    const std::string ns = fmt::format("hetps-w{}-{}", i, pid);
    const std::string veth = fmt::format("hw{}v{}", i, pid);
    worker_ns_.push_back(ns);
    const std::vector<std::string> commands = {
        fmt::format("ip netns add {}", ns),
        fmt::format("ip link add {} type veth peer name eth0 netns {}", veth, ns),
        fmt::format("ip link set {} master {} up", veth, bridge_),
        fmt::format("ip -n {} addr add 10.204.0.{}/24 dev eth0", ns, 20 + i),
        fmt::format("ip -n {} link set eth0 up", ns),
        fmt::format("ip -n {} link set lo up", ns),
        fmt::format("tc qdisc add dev {} root tbf rate {} burst 1mbit latency 100ms", veth, rate_),
        fmt::format("ip netns exec {} tc qdisc add dev eth0 root tbf rate {} burst 1mbit latency "
                    "100ms",
                    ns, rate_)};
    for (const std::string& c : commands) {
      if (auto r = Run(c); !r.ok()) return r.status();  // the destructor removes what was made
    }
  }
  return Status();
}

Status ServerHost::EnterWorkerHost(int i) const {
  const std::string path = "/var/run/netns/" + worker_ns_.at(static_cast<size_t>(i));
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Internal(fmt::format("cannot open {}", path));
  const int r = setns(fd, CLONE_NEWNET);
  close(fd);
  if (r != 0) return Status::Internal(fmt::format("cannot enter {}", path));
  return Status();
}

void ServerHost::Place(LocalClusterOptions& cluster) const {
  cluster.scheduler_bind = kSchedulerBind;
  cluster.server_exec = "ip netns exec " + ns_;
  cluster.server_bind = kServerBind;
}

ServerHost::~ServerHost() {
  for (const std::string& ns : worker_ns_) (void)Run("ip netns del " + ns);
  (void)Run("ip netns del " + ns_);
  (void)Run("ip link del " + bridge_);
}

int64_t ServerHost::BytesToServer() const { return Sent("tc -s qdisc show dev " + veth_); }

int64_t ServerHost::BytesFromServer() const {
  return Sent(fmt::format("ip netns exec {} tc -s qdisc show dev eth0", ns_));
}

}  // namespace hetps::bench
