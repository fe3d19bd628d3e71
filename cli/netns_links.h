// NetnsLinks: the emulated edge links of `hetps launch --links=netns`, for experiments that want
// the kernel's own TCP under the bandwidth limit instead of the transport's model of it. A
// bridge hpb<pid> holding <subnet>.0.1/16; per client a network namespace hetps-<pid>-<rank>
// whose eth0 (<subnet>.<rank / 250>.<rank % 250 + 2>) is the peer of the bridge port
// hpv<pid>-<rank>. tc tbf limits the namespace's eth0 to the client's uplink and the bridge
// port to its downlink (rates raised by the Ethernet, IP and TCP headers of a full segment,
// 1514/1448, so the payload flows at the link's figure, as in the transport mode); a LinkProxy
// on the bridge's address adds latency, jitter and losses, and leads on to the scheduler and
// the servers listening on 127.0.0.1 at the proxy's ports.
//
// Needs root and iproute2 (ip, tc). Everything is removed when the object goes, also after a
// failed Create; names carry the creating process's pid, so Create also removes what a launch
// that was killed (SIGKILL: no chance to clean up) left behind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/link_proxy.h"
#include "common/status.h"
#include "worker/link_shaper.h"

namespace hetps {

struct NetnsClient {
  int rank = 0;
  LinkOptions link;
};

class NetnsLinks {
 public:
  // Fails naming the command that failed (after removing what it had made), or why it cannot
  // run here (not root, no ip or tc). `subnet`: the first two octets, e.g. "10.203".
  static StatusOr<std::unique_ptr<NetnsLinks>> Create(const std::vector<NetnsClient>& clients,
                                                      const std::string& subnet = "10.203");
  ~NetnsLinks();
  NetnsLinks(const NetnsLinks&) = delete;
  NetnsLinks& operator=(const NetnsLinks&) = delete;

  // Where the clients reach the cluster: the bridge's address.
  const std::string& address() const { return address_; }
  // Client `rank`'s namespace and the command prefix that runs a program in it.
  std::string Namespace(int rank) const;
  std::vector<std::string> Exec(int rank) const;
  // A port on the bridge's address that leads to 127.0.0.1 at the same port (where the
  // scheduler or a server must bind); `delay`: false for the scheduler. Before StartProxy.
  StatusOr<int> Forward(bool delay) { return proxy_->Listen(address_, delay); }
  Status StartProxy() { return proxy_->Start(); }

  // Why namespaces cannot be made here (not root, no ip or tc), or "" when they can.
  static std::string Unavailable();
  // Removes the namespaces and bridges of launches whose process is gone. Best effort.
  static void RemoveStale();
  // The namespaces that process `pid` made and are still here (none once its NetnsLinks went).
  static std::vector<std::string> NamespacesOf(int pid);

 private:
  NetnsLinks() = default;
  Status Build(const std::vector<NetnsClient>& clients, const std::string& subnet);
  void TearDown();

  std::string tag_;  // the pid
  std::string bridge_;
  std::string address_;
  std::vector<int> ranks_;
  std::unique_ptr<LinkProxy> proxy_;
};

}  // namespace hetps
