// --auth=curve end to end (common/auth.h): a cluster whose every connection is CURVE-encrypted
// and admitted by key. Exact pushes and pulls and a whole training run with keys; peers without
// a listed key, with the wrong key or with a key of the wrong role are refused (and the
// scheduler logs them with their address); a capture of the loopback traffic holds no tensor
// value in the clear; a daemon refuses to listen off loopback without keys.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <regex>
#include <sstream>
#include <thread>

#include "common/auth.h"
#include "common/message.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

using namespace std::chrono_literals;

// Keys made for the test, and the flags every role takes with them.
struct Keys {
  ScratchDir dir{"hetps-auth-keys"};
  Keys() { EXPECT_TRUE(WriteKeys(dir.str(), {}).ok()); }
  std::vector<std::string> Flags() const { return {"--auth=curve", "--keys=" + dir.str()}; }
  std::string Cli() const { return " --auth=curve --keys=" + dir.str(); }
  ClientOptions Client(ClientOptions o) const {
    o.auth = "curve";
    o.keys_dir = dir.str();
    return o;
  }
};

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<TensorSpec> kTensors = {{"w", {3000}, 0}, {"b", {10}, 1}};

// One server and one worker expected, with keys, every process's output in `log`.
struct LoggedKeyedCluster {
  Keys keys;
  std::string log = keys.dir.str() + "-cluster.log";
  LocalCluster cluster{{.servers = 1,
                        .workers = 1,
                        .scheduler_flags = keys.Flags(),
                        .server_flags = keys.Flags(),
                        .log_file = log}};
  ~LoggedKeyedCluster() { std::filesystem::remove(log); }
};

// Key material of its own in `dir`, with `keys`' scheduler.pub: keys the cluster does not list,
// held by a peer that knows whom it dials.
void WriteUnlistedKeys(const Keys& keys, const ScratchDir& dir) {
  ASSERT_TRUE(WriteKeys(dir.str(), {}).ok());
  std::filesystem::copy_file(keys.dir.path() / "scheduler.pub", dir.path() / "scheduler.pub",
                             std::filesystem::copy_options::overwrite_existing);
}

TEST(SecureClusterTest, KeyedClientsPushAndPullExactlyAndOnlyOperatorsControlTheCluster) {
  Keys keys;
  LocalCluster cluster(
      {.servers = 2,
       .workers = 2,
       .scheduler_flags = With({"--partition_bytes=4096"}, keys.Flags()),
       .server_flags = With({"--optimizer=sgd:lr=1", "--init=zeros"}, keys.Flags())});
  std::vector<std::unique_ptr<Client>> clients(2);
  LocalCluster::RunEach(2, [&](int i) {
    auto c = Client::Connect(keys.Client(cluster.ClientOpts()));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    clients[i] = std::move(*c);
    ASSERT_TRUE(clients[i]->DeclareTensors(kTensors).ok());
  });
  ASSERT_GT(clients[0]->shard_map().PartitionsOf(clients[0]->shard_map().TensorId("w")).size(), 1u);
  LocalCluster::RunEach(2, [&](int i) {
    for (const TensorSpec& t : kTensors) {
      std::vector<float> g(t.NumElements());
      for (int64_t j = 0; j < t.NumElements(); ++j) g[j] = 0.5f * (i + 1) + j;
      ASSERT_TRUE(clients[i]->Push(t.name, g.data(), t.NumElements()).Wait().ok());
    }
    ASSERT_TRUE(clients[i]->Barrier().ok());
    for (const TensorSpec& t : kTensors) {
      std::vector<float> v(t.NumElements(), 7);
      ASSERT_TRUE(clients[i]->Pull(t.name, v.data(), t.NumElements()).Wait().ok());
      for (int64_t j = 0; j < t.NumElements(); ++j) ASSERT_EQ(v[j], -(1.5f + 2.0f * j)) << j;
    }
  });

  const std::string ctl = Bin("hetps") + " ctl --scheduler=" + cluster.endpoint() + keys.Cli();
  Ran as_worker = Shell(ctl + " --key=worker set consistency=ssp:staleness=2");
  EXPECT_EQ(as_worker.code, 1) << as_worker.output;
  EXPECT_NE(as_worker.output.find("PERMISSION_DENIED"), std::string::npos) << as_worker.output;
  EXPECT_NE(as_worker.output.find("needs an operator key"), std::string::npos);
  Ran as_operator = Shell(ctl + " set consistency=ssp:staleness=2");
  EXPECT_EQ(as_operator.code, 0) << as_operator.output;
  EXPECT_NE(as_operator.output.find("applied on every server"), std::string::npos);
  Ran status =
      Shell(Bin("hetps") + " status --json --scheduler=" + cluster.endpoint() + keys.Cli());
  EXPECT_EQ(status.code, 0) << status.output;
  EXPECT_NE(status.output.find("\"workers\""), std::string::npos);
  // A worker that joins the running cluster is admitted by every server with its key too.
  auto late = Client::Connect(keys.Client(cluster.ClientOpts()));
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  ASSERT_TRUE((*late)->DeclareTensors(kTensors).ok());
  std::vector<float> g(3000, 1.0f), v(3000);
  ASSERT_TRUE((*late)->Push("w", g.data(), 3000).Wait().ok());
  ASSERT_TRUE((*late)->Pull("w", v.data(), 3000).Wait().ok());
  EXPECT_EQ(v[2], -(1.5f + 2.0f * 2) - 1.0f);
  EXPECT_TRUE((*late)->Finish().ok());
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

TEST(SecureClusterTest, PeersWithoutAListedKeyOrInTheWrongRoleAreRefused) {
  LoggedKeyedCluster c;
  const Keys& keys = c.keys;
  const std::string& log = c.log;
  LocalCluster& cluster = c.cluster;
  const std::string status =
      Bin("hetps") + " status --timeout_ms=1500 --scheduler=" + cluster.endpoint();
  // No key at all: the handshake never completes.
  Ran plain = Shell(status);
  EXPECT_NE(plain.code, 0);
  EXPECT_NE(plain.output.find("DEADLINE_EXCEEDED"), std::string::npos) << plain.output;
  // Another cluster's keys, knowing this scheduler's public key: refused by the allow-list.
  ScratchDir stranger("hetps-auth-stranger");
  WriteUnlistedKeys(keys, stranger);
  Ran wrong = Shell(status + " --auth=curve --keys=" + stranger.str());
  EXPECT_NE(wrong.code, 0) << wrong.output;
  ClientOptions o = cluster.ClientOpts();
  o.join_timeout_ms = 1500;
  o.auth = "curve";
  o.keys_dir = stranger.str();
  auto intruder = Client::Connect(o);
  EXPECT_FALSE(intruder.ok());

  // A listed worker key that registers as a server is answered PERMISSION_DENIED.
  auto worker_auth = LoadAuth(AuthFlags{"curve", keys.dir.str(), ""}, KeyRole::kWorker);
  ASSERT_TRUE(worker_auth.ok());
  {
    zmq::context_t ctx(1);
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::rcvtimeo, 5000);
    ASSERT_TRUE(worker_auth->SecureClient(dealer, worker_auth->scheduler_public).ok());
    dealer.connect(cluster.endpoint());
    proto::Header reg;
    reg.set_type(proto::REGISTER);
    reg.set_role(proto::SERVER);
    reg.set_address("tcp://127.0.0.1:9");
    reg.set_request_id(1);
    ASSERT_TRUE(Send(dealer, reg));
    auto reply = Receive(dealer, zmq::recv_flags::none, /*routed=*/false);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(StatusOf(reply->message.header).code(), StatusCode::kPermissionDenied)
        << reply->message.header.DebugString();
  }

  auto worker = Client::Connect(keys.Client(cluster.ClientOpts()));
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  ASSERT_TRUE((*worker)->DeclareTensors(kTensors).ok());
  std::vector<float> g(3000, 1.0f);
  EXPECT_TRUE((*worker)->Push("w", g.data(), 3000).Wait().ok());
  EXPECT_TRUE((*worker)->Finish().ok());
  const std::string text = Slurp(log);
  EXPECT_NE(text.find("refused a connection from 127.0.0.1: key"), std::string::npos) << text;
  EXPECT_NE(text.find("is not in the allow-list"), std::string::npos) << text;
  EXPECT_NE(text.find("a worker key cannot register a server"), std::string::npos) << text;
}

// SIGHUP makes the scheduler and the servers read the allow-list again: a key added is admitted
// from then on, a key removed is refused, and a bad file leaves the list as it was.
TEST(SecureClusterTest, ASighupReloadsTheAllowList) {
  LoggedKeyedCluster c;
  const Keys& keys = c.keys;
  const std::string& log = c.log;
  LocalCluster& cluster = c.cluster;
  ScratchDir newcomer("hetps-auth-newcomer");  // a key pair the cluster does not list yet
  WriteUnlistedKeys(keys, newcomer);
  ClientOptions o = cluster.ClientOpts();
  o.join_timeout_ms = 1500;
  o.auth = "curve";
  o.keys_dir = newcomer.str();
  EXPECT_FALSE(Client::Connect(o).ok()) << "not listed yet";
  o.join_timeout_ms = 15000;  // admitted from here on

  auto reloads = [&] {
    const std::string text = Slurp(log);
    size_t n = 0;
    for (size_t at = text.find("reloaded the allow-list"); at != std::string::npos;
         at = text.find("reloaded the allow-list", at + 1)) {
      ++n;
    }
    return n;
  };
  auto hangup = [&](size_t expected_reloads) {
    cluster.scheduler().Signal(SIGHUP);
    cluster.server(0).Signal(SIGHUP);
    for (int i = 0; i < 100 && reloads() < expected_reloads; ++i) std::this_thread::sleep_for(50ms);
    ASSERT_EQ(reloads(), expected_reloads) << Slurp(log);
  };
  const std::string allow = (keys.dir.path() / "allow").string();
  const std::string listed = Slurp(allow);
  auto pub = ReadCurveKey((newcomer.path() / "worker.pub").string(), false);
  ASSERT_TRUE(pub.ok());
  std::ofstream(allow, std::ios::app) << "worker " << pub->public_key << " newcomer\n";
  hangup(2);
  EXPECT_NE(Slurp(log).find("reloaded the allow-list: 5 keys (1 added, 0 removed)"),
            std::string::npos)
      << Slurp(log);
  // It stays connected to the end (the cluster ends when its last worker finishes).
  auto added = Client::Connect(o);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  ASSERT_TRUE((*added)->DeclareTensors(kTensors).ok());
  std::vector<float> g(3000, 1.0f);
  EXPECT_TRUE((*added)->Push("w", g.data(), 3000).Wait().ok()) << "the server admits it too";
  // A worker connected with the cluster's own key before it is taken off the list.
  ClientOptions veteran_options = keys.Client(cluster.ClientOpts());
  veteran_options.join_timeout_ms = 15000;
  auto veteran = Client::Connect(veteran_options);
  ASSERT_TRUE(veteran.ok()) << veteran.status().ToString();
  ASSERT_TRUE((*veteran)->DeclareTensors(kTensors).ok());
  EXPECT_TRUE((*veteran)->Push("w", g.data(), 3000).Wait().ok());

  // The cluster's own worker key taken off the list: refused from now on, new connections and
  // the one already open (its next message, at the server as at the scheduler).
  std::string without_worker;
  std::istringstream lines(listed);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("worker ", 0) != 0) without_worker += line + "\n";
  }
  std::ofstream(allow) << without_worker << "worker " << pub->public_key << " newcomer\n";
  hangup(4);
  ClientOptions old = keys.Client(cluster.ClientOpts());
  old.join_timeout_ms = 1500;
  EXPECT_FALSE(Client::Connect(old).ok()) << "a removed key";
  const Status cut = (*veteran)->Push("w", g.data(), 3000).Wait();
  EXPECT_EQ(cut.code(), StatusCode::kPermissionDenied) << cut.ToString();
  EXPECT_NE(cut.message().find("no longer a worker key of the allow-list"), std::string::npos)
      << cut.ToString();
  EXPECT_TRUE((*added)->Push("w", g.data(), 3000).Wait().ok()) << "a key still listed";
  veteran->reset();  // its Finish would be refused too

  // A bad file: the list stays as it was (the newcomer still admitted).
  std::ofstream(allow, std::ios::app) << "root nonsense\n";
  cluster.scheduler().Signal(SIGHUP);
  for (int i = 0; i < 100 && Slurp(log).find("stays as it was") == std::string::npos; ++i) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_NE(Slurp(log).find("the allow-list stays as it was"), std::string::npos) << Slurp(log);
  auto still = Client::Connect(o);
  ASSERT_TRUE(still.ok()) << still.status().ToString();
  EXPECT_TRUE((*still)->Finish().ok());
  EXPECT_TRUE((*added)->Finish().ok());
}

// A node is pinned to the key it registered with: another listed worker key (a per-node pair)
// speaking on a connection with the registered node's identity is refused, at the scheduler and
// at a server; its own key is not.
TEST(SecureClusterTest, ANodeIsPinnedToTheKeyItRegisteredWith) {
  Keys keys;
  ASSERT_TRUE(WriteKeys(keys.dir.str(), {CurveKey{"edge-7", KeyRole::kWorker, "", ""}}).ok());
  LocalCluster cluster(
      {.servers = 1, .workers = 1, .scheduler_flags = keys.Flags(), .server_flags = keys.Flags()});
  auto call = [&](const std::string& key, proto::MsgType type) {
    std::this_thread::sleep_for(300ms);  // the previous connection with this identity is gone
    auto auth = LoadAuth(AuthFlags{"curve", keys.dir.str(), key}, KeyRole::kWorker);
    EXPECT_TRUE(auth.ok()) << auth.status().ToString();
    zmq::context_t ctx(1);
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::rcvtimeo, 5000);
    dealer.set(zmq::sockopt::routing_id, std::string("pinned-node"));
    EXPECT_TRUE(auth->SecureClient(dealer, auth->scheduler_public).ok());
    dealer.connect(cluster.endpoint());
    proto::Header h;
    h.set_type(type);
    h.set_role(proto::WORKER);
    h.set_request_id(1);
    EXPECT_TRUE(Send(dealer, h));
    // The answer to this request (the cluster's own messages to the node may come first).
    for (int i = 0; i < 8; ++i) {
      auto reply = Receive(dealer, zmq::recv_flags::none, /*routed=*/false);
      if (!reply) break;
      if (reply->message.header.request_id() == 1) return reply->message.header;
    }
    return proto::Header();
  };
  const proto::Header registered = call("worker", proto::REGISTER);
  ASSERT_EQ(registered.type(), proto::REGISTER_REPLY);
  const proto::Header other = call("edge-7", proto::HEARTBEAT);
  EXPECT_EQ(StatusOf(other).code(), StatusCode::kPermissionDenied) << other.DebugString();
  EXPECT_NE(other.error_message().find("registered with another key"), std::string::npos);
  EXPECT_EQ(call("worker", proto::HEARTBEAT).type(), proto::HEARTBEAT);

  // The server holds the node's requests to the same key (the scheduler announced it).
  Ran status =
      Shell(Bin("hetps") + " status --json --scheduler=" + cluster.endpoint() + keys.Cli());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(status.output, m, std::regex(R"re("address":"(tcp://[^"]+)")re")))
      << status.output;
  const std::string server = m[1];
  auto pull_as = [&](const std::string& key) {
    auto auth = LoadAuth(AuthFlags{"curve", keys.dir.str(), key}, KeyRole::kWorker);
    EXPECT_TRUE(auth.ok());
    zmq::context_t ctx(1);
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::rcvtimeo, 5000);
    dealer.set(zmq::sockopt::routing_id, NodeIdentity(registered.node()));
    // The server's key, as a worker learns it from the cluster view.
    auto server_key = ReadCurveKey((keys.dir.path() / "server.pub").string(), false);
    EXPECT_TRUE(auth->SecureClient(dealer, server_key->public_key).ok());
    dealer.connect(server);
    proto::Header h;
    h.set_type(proto::PULL);
    h.set_sender(registered.node());
    h.set_request_id(9);
    EXPECT_TRUE(Send(dealer, h));
    auto reply = Receive(dealer, zmq::recv_flags::none, /*routed=*/false);
    return reply ? StatusOf(reply->message.header) : Status::DeadlineExceeded("no reply");
  };
  const Status impostor = pull_as("edge-7");
  EXPECT_EQ(impostor.code(), StatusCode::kPermissionDenied) << impostor.ToString();
  std::this_thread::sleep_for(300ms);
  const Status own = pull_as("worker");  // passes the key check; no shard map is installed yet
  EXPECT_EQ(own.code(), StatusCode::kUnavailable) << own.ToString();
}

TEST(SecureClusterTest, TheQuickstartModelTrainsWithKeys) {
  Keys keys;
  LocalCluster cluster({.servers = 2,
                        .workers = 2,
                        .scheduler_flags = keys.Flags(),
                        .server_flags = With({"--consistency=ssp:staleness=2",
                                              "--optimizer=adam:lr=0.001", "--init=worker"},
                                             keys.Flags())});
  std::vector<std::unique_ptr<Process>> procs;
  for (int i = 0; i < 2; ++i) {
    procs.push_back(
        cluster.StartWorker(With({"--workload=train", "--progress_every=100000", "--iterations=300",
                                  "--eval_every=300", "--data_seed=3"},
                                 keys.Flags()),
                            cluster.Path("trainer" + std::to_string(i))));
  }
  std::string outputs;
  for (int i = 0; i < 2; ++i) {
    auto st = procs[i]->WaitExit(120s);
    const std::string out = Slurp(cluster.Path("trainer" + std::to_string(i)));
    outputs += out;
    EXPECT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << out;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(outputs, m, std::regex(R"(final test accuracy ([0-9.]+))")))
      << outputs;
  EXPECT_GT(std::stod(m[1]), 0.80) << outputs;
}

// The TCP payload of every IPv4 segment to or from `port` on the loopback interface
// (AF_PACKET: root) while it runs; other tests' traffic is left out.
class LoopbackCapture {
 public:
  explicit LoopbackCapture(int port) : port_(port) {
    fd_ = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd_ < 0) return;
    int size = 64 << 20;
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size));
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd_);
      fd_ = -1;
      return;
    }
    thread_ = std::thread([this] {
      std::vector<char> buf(1 << 17);
      pollfd p{fd_, POLLIN, 0};
      while (!stop_.load()) {
        if (poll(&p, 1, 50) <= 0) continue;
        const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
        if (n > 0) Keep(reinterpret_cast<const uint8_t*>(buf.data()), static_cast<size_t>(n));
      }
    });
  }
  ~LoopbackCapture() { Stop(); }
  bool ok() const { return fd_ >= 0; }
  // Stops and returns what was captured.
  const std::string& Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return bytes_;
  }

 private:
  // An Ethernet frame (loopback's are Ethernet with zero addresses).
  void Keep(const uint8_t* frame, size_t n) {
    if (n < 14 + 20 || frame[12] != 0x08 || frame[13] != 0x00) return;  // IPv4 only
    const uint8_t* ip = frame + 14;
    const size_t ip_header = (ip[0] & 0x0f) * 4u;
    const size_t ip_total = std::min<size_t>((ip[2] << 8) | ip[3], n - 14);
    if (ip[9] != IPPROTO_TCP || ip_header + 20 > ip_total) return;
    const uint8_t* tcp = ip + ip_header;
    const int src = (tcp[0] << 8) | tcp[1], dst = (tcp[2] << 8) | tcp[3];
    const size_t tcp_header = (tcp[12] >> 4) * 4u;
    if ((src != port_ && dst != port_) || ip_header + tcp_header > ip_total) return;
    if (bytes_.size() < (size_t{256} << 20)) {
      bytes_.append(reinterpret_cast<const char*>(tcp + tcp_header),
                    ip_total - ip_header - tcp_header);
    }
  }

  const int port_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::string bytes_;
};

// Pushes a tensor of a recognizable float pattern through a cluster with or without keys while
// capturing the server's loopback traffic; returns how often the pattern's 16 bytes appear in
// it.
size_t PatternSeenInCapture(const Keys* keys) {
  const float pattern[4] = {1.2345678f, -8.7654321f, 3.1415926f, 2.7182818f};
  const std::string needle(reinterpret_cast<const char*>(pattern), sizeof(pattern));
  std::vector<std::string> flags = keys ? keys->Flags() : std::vector<std::string>{};
  const int port = FreePort();
  EXPECT_GT(port, 0);
  LocalCluster cluster({.servers = 1,
                        .workers = 1,
                        .scheduler_flags = flags,
                        .server_flags = With({"--optimizer=sgd:lr=1", "--init=zeros"}, flags),
                        .server_own_flags = {{fmt::format("--bind=tcp://127.0.0.1:{}", port)}}});
  LoopbackCapture capture(port);
  EXPECT_TRUE(capture.ok());
  // The tensors go over TCP (not a co-located transport, which keys leave on), so that the
  // capture sees what the socket carries.
  ClientOptions options = keys ? keys->Client(cluster.ClientOpts()) : cluster.ClientOpts();
  options.transport = "socket";
  auto client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  if (!client.ok()) return 0;
  const int64_t n = 1 << 16;
  EXPECT_TRUE((*client)->DeclareTensors({{"secret", {n}, 0}}).ok());
  std::vector<float> grad(n);
  for (int64_t i = 0; i < n; ++i) grad[i] = pattern[i % 4];
  for (int i = 0; i < 4; ++i) EXPECT_TRUE((*client)->Push("secret", grad.data(), n).Wait().ok());
  std::vector<float> values(n);
  EXPECT_TRUE((*client)->Pull("secret", values.data(), n).Wait().ok());
  EXPECT_EQ(values[0], -4 * pattern[0]);  // the pushes did arrive
  EXPECT_EQ((*client)->stats().shared_memory_bytes, 0) << "the payloads left the socket";
  EXPECT_TRUE((*client)->Finish().ok());
  const std::string& bytes = capture.Stop();
  EXPECT_GT(bytes.size(), size_t{4} * n * sizeof(float)) << "the capture saw the pushes";
  size_t seen = 0;
  for (size_t at = bytes.find(needle); at != std::string::npos; at = bytes.find(needle, at + 1)) {
    ++seen;
  }
  std::printf("%s: the tensor's pattern %zu times in %zu bytes of the server's traffic\n",
              keys ? "--auth=curve" : "no auth", seen, bytes.size());
  return seen;
}

TEST(SecureClusterTest, LoopbackTrafficOfAKeyedClusterHoldsNoTensorInTheClear) {
  if (geteuid() != 0) GTEST_SKIP() << "capturing loopback traffic needs root (AF_PACKET)";
  Keys keys;
  EXPECT_EQ(PatternSeenInCapture(&keys), 0u) << "tensor bytes in the clear with --auth=curve";
  // The same pushes without keys: the capture does show them, so the check above can fail.
  EXPECT_GT(PatternSeenInCapture(nullptr), 1000u);
}

// Keys leave the co-located transports on (the headers stay on the authenticated socket; the
// payloads go through a segment only this user can open): the pushes and pulls are exact, take
// the shared memory path, and none of the tensor crosses the socket.
TEST(SecureClusterTest, AKeyedClusterKeepsItsCoLocatedTransport) {
  Keys keys;
  LocalCluster cluster(
      {.servers = 1,
       .workers = 1,
       .scheduler_flags = keys.Flags(),
       .server_flags = With({"--optimizer=sgd:lr=1", "--init=zeros"}, keys.Flags())});
  ClientOptions options = keys.Client(cluster.ClientOpts());
  options.transport = "shm";
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const int64_t n = 1 << 16;
  ASSERT_TRUE((*client)->DeclareTensors({{"w", {n}, 0}}).ok());
  std::vector<float> grad(n);
  for (int64_t i = 0; i < n; ++i) grad[i] = static_cast<float>(i % 7);
  ASSERT_TRUE((*client)->Push("w", grad.data(), n).Wait().ok());
  std::vector<float> values(n);
  ASSERT_TRUE((*client)->Pull("w", values.data(), n).Wait().ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(values[i], -grad[i]) << i;
  EXPECT_GE((*client)->stats().shared_memory_bytes, 2 * n * int64_t{sizeof(float)});
  EXPECT_TRUE((*client)->Finish().ok());
}

TEST(SecureClusterTest, DaemonsRefuseToListenOffLoopbackWithoutKeysUnlessInsecure) {
  Ran scheduler = Shell(Bin("hetps-scheduler") + " --bind=tcp://0.0.0.0:0");
  EXPECT_EQ(scheduler.code, 2) << scheduler.output;
  EXPECT_NE(scheduler.output.find("refusing to listen on tcp://0.0.0.0:0 without authentication"),
            std::string::npos)
      << scheduler.output;
  Ran server = Shell(Bin("hetps-server") + " --scheduler=tcp://127.0.0.1:9 --bind=tcp://*:0");
  EXPECT_EQ(server.code, 2) << server.output;
  EXPECT_NE(server.output.find("--auth=curve --keys=DIR"), std::string::npos) << server.output;
  // --insecure says the operator accepts it: the scheduler starts (and is stopped by the test).
  LocalCluster open({.servers = 1,
                     .workers = 1,
                     .scheduler_flags = {"--insecure"},
                     .server_flags = {"--insecure"},
                     .scheduler_bind = "tcp://0.0.0.0:*"});
  EXPECT_NE(open.endpoint().find("0.0.0.0"), std::string::npos);
}

}  // namespace
}  // namespace hetps::testing
