#include "cli/netns_links.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/subprocess.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;

constexpr char kNetnsDir[] = "/run/netns";
constexpr int kMaxRank = 9999;  // hpv<pid>-<rank> must fit an interface name (15 characters)

// Runs a command; fails with its output when it does not succeed.
Status Run(const std::vector<std::string>& argv) {
  auto run = RunCaptured(argv, true);
  if (!run.ok()) return run.status();
  if (run->succeeded()) return Status();
  std::string out = run->output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  return Status::Unavailable(fmt::format("'{}' failed: {}", command, out));
}

// Runs `lines` as one batch of `tool` (ip or tc), with `prefix` options (e.g. -n NS).
Status Batch(const std::string& tool, const std::vector<std::string>& prefix,
             const std::vector<std::string>& lines, bool force = false) {
  if (lines.empty()) return Status();
  char path[] = "/tmp/hetps-netns-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return Status::Internal("cannot create a temporary file");
  close(fd);
  {
    std::ofstream out(path);
    for (const std::string& l : lines) out << l << "\n";
    out.close();
    if (!out) {
      unlink(path);
      return Status::Internal(fmt::format("cannot write {} for {}", path, tool));
    }
  }
  std::vector<std::string> argv = {tool};
  argv.insert(argv.end(), prefix.begin(), prefix.end());
  if (force) argv.push_back("-force");
  argv.insert(argv.end(), {"-batch", path});
  Status s = Run(argv);
  unlink(path);
  return s;
}

// "rate R burst B latency 1s" for `mbps` of payload: the rate raised by a full segment's
// headers (1514 bytes on the wire carry 1448), the burst two frames or 1 ms of the rate.
std::string Tbf(double mbps) {
  const double bits = mbps * 1e6 * 1514.0 / 1448.0;
  const int64_t burst = std::max<int64_t>(2 * 1514, static_cast<int64_t>(bits / 8 / 1000));
  return fmt::format("root tbf rate {}bit burst {} latency 1s", static_cast<int64_t>(bits), burst);
}

bool Alive(const std::string& pid) {
  char* end = nullptr;
  const long p = std::strtol(pid.c_str(), &end, 10);
  if (pid.empty() || *end != '\0' || p <= 0) return true;  // not ours to judge
  return kill(static_cast<pid_t>(p), 0) == 0 || errno != ESRCH;
}

// Whether `address` is already on an interface here (bind succeeds only then).
bool AddressInUse(const std::string& address) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) return false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return bound;
}

std::string ClientAddress(const std::string& subnet, int rank) {
  return fmt::format("{}.{}.{}", subnet, rank / 250, rank % 250 + 2);
}

}  // namespace

StatusOr<std::unique_ptr<NetnsLinks>> NetnsLinks::Create(const std::vector<NetnsClient>& clients,
                                                         const std::string& subnet) {
  if (std::string why = Unavailable(); !why.empty()) {
    return Status::FailedPrecondition("--links=netns " + why);
  }
  in_addr check{};
  if (inet_pton(AF_INET, (subnet + ".0.1").c_str(), &check) != 1) {
    return Status::InvalidArgument("the namespaces' subnet must be two octets, e.g. 10.203; got '" +
                                   subnet + "'");
  }
  for (const NetnsClient& c : clients) {
    if (c.rank < 0 || c.rank > kMaxRank) {
      return Status::InvalidArgument(
          fmt::format("--links=netns takes client ranks 0..{}, got {}", kMaxRank, c.rank));
    }
  }
  RemoveStale();
  if (AddressInUse(subnet + ".0.1")) {
    return Status::FailedPrecondition(fmt::format(
        "{}.0.1 is already on an interface here (another --links=netns launch?): give another "
        "--netns_subnet",
        subnet));
  }
  std::unique_ptr<NetnsLinks> links(new NetnsLinks());
  if (Status s = links->Build(clients, subnet); !s.ok()) return s;  // the destructor cleans up
  return links;
}

Status NetnsLinks::Build(const std::vector<NetnsClient>& clients, const std::string& subnet) {
  tag_ = std::to_string(getpid());
  bridge_ = "hpb" + tag_;
  address_ = subnet + ".0.1";
  std::map<std::string, LinkOptions> by_address;
  for (const NetnsClient& c : clients) by_address[ClientAddress(subnet, c.rank)] = c.link;
  proxy_ = std::make_unique<LinkProxy>(by_address);

  // The bridge and every namespace with its veth pair, in one batch.
  std::vector<std::string> root = {fmt::format("link add {} type bridge", bridge_),
                                   fmt::format("addr add {}/16 dev {}", address_, bridge_),
                                   fmt::format("link set {} up", bridge_)};
  for (const NetnsClient& c : clients) {
    ranks_.push_back(c.rank);
    const std::string port = fmt::format("hpv{}-{}", tag_, c.rank);
    root.push_back("netns add " + Namespace(c.rank));
    root.push_back(
        fmt::format("link add {} type veth peer name eth0 netns {}", port, Namespace(c.rank)));
    root.push_back(fmt::format("link set {} master {} up", port, bridge_));
  }
  if (Status s = Batch("ip", {}, root); !s.ok()) return s;
  // Inside each namespace: its address, up; its uplink limit. Downlink limits on the ports.
  std::vector<std::string> down;
  for (const NetnsClient& c : clients) {
    const std::string ns = Namespace(c.rank);
    Status s = Batch("ip", {"-n", ns},
                     {fmt::format("addr add {}/16 dev eth0", ClientAddress(subnet, c.rank)),
                      "link set eth0 up", "link set lo up"});
    if (s.ok() && c.link.up_mbps > 0) {
      s = Batch("tc", {"-n", ns}, {"qdisc add dev eth0 " + Tbf(c.link.up_mbps)});
    }
    if (!s.ok()) return s;
    if (c.link.down_mbps > 0) {
      down.push_back(fmt::format("qdisc add dev hpv{}-{} {}", tag_, c.rank, Tbf(c.link.down_mbps)));
    }
  }
  return Batch("tc", {}, down);
}

NetnsLinks::~NetnsLinks() {
  proxy_.reset();  // closes its connections first
  TearDown();
}

void NetnsLinks::TearDown() {
  if (tag_.empty()) return;
  std::vector<std::string> lines;
  for (int rank : ranks_) lines.push_back("netns del " + Namespace(rank));
  lines.push_back("link del " + bridge_);
  (void)Batch("ip", {}, lines, /*force=*/true);
}

std::string NetnsLinks::Namespace(int rank) const { return fmt::format("hetps-{}-{}", tag_, rank); }

std::vector<std::string> NetnsLinks::Exec(int rank) const {
  return {"ip", "netns", "exec", Namespace(rank)};
}

std::string NetnsLinks::Unavailable() {
  if (geteuid() != 0) {
    return "needs root (network namespaces, tc): run as root or use the default "
           "--links=transport";
  }
  for (const char* tool : {"ip", "tc"}) {
    auto run = RunCaptured({tool, "-V"}, true);
    if (!run.ok() || !run->succeeded()) {
      return fmt::format("needs iproute2's {} (apt-get install iproute2)", tool);
    }
  }
  return "";
}

void NetnsLinks::RemoveStale() {
  std::vector<std::string> lines;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kNetnsDir, ec)) {
    const std::string name = entry.path().filename().string();  // hetps-<pid>-<rank>
    if (name.rfind("hetps-", 0) != 0) continue;
    const size_t dash = name.find('-', 6);
    if (dash == std::string::npos || Alive(name.substr(6, dash - 6))) continue;
    lines.push_back("netns del " + name);
  }
  for (const auto& entry : fs::directory_iterator("/sys/class/net", ec)) {
    // hpb<pid>, and hpv<pid>-<rank>: a veth outlives its namespace's name while a socket of the
    // killed launch's proxy still holds a route through it.
    const std::string name = entry.path().filename().string();
    if (name.rfind("hpb", 0) == 0 && !Alive(name.substr(3))) lines.push_back("link del " + name);
    if (name.rfind("hpv", 0) == 0 && name.find('-') != std::string::npos &&
        !Alive(name.substr(3, name.find('-') - 3))) {
      lines.push_back("link del " + name);
    }
  }
  (void)Batch("ip", {}, lines, /*force=*/true);
}

std::vector<std::string> NetnsLinks::NamespacesOf(int pid) {
  std::vector<std::string> names;
  const std::string prefix = fmt::format("hetps-{}-", pid);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kNetnsDir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

}  // namespace hetps
