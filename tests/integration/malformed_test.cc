// Raw frames against live scheduler and server processes: every bad message gets a typed error
// reply and the processes keep serving the real client beside it; a frame larger than a process
// reads closes its connection unread.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>

#include "common/batch.h"
#include "common/cross_memory.h"
#include "common/message.h"
#include "common/shard_map.h"
#include "common/shm_segment.h"
#include "common/subprocess.h"
#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

// A worker speaking the wire protocol by hand.
class RawWorker {
 public:
  explicit RawWorker(const std::string& scheduler) {
    sched_.set(zmq::sockopt::routing_id, std::string("raw-worker"));
    sched_.set(zmq::sockopt::linger, 0);
    sched_.set(zmq::sockopt::rcvtimeo, 20000);
    sched_.connect(scheduler);
  }

  proto::Header Call(zmq::socket_t& s, const proto::Header& h, std::vector<zmq::message_t> p = {}) {
    EXPECT_TRUE(Send(s, h, std::move(p)));
    return Next(s);
  }
  proto::Header Next(zmq::socket_t& s) {
    auto env = Receive(s, zmq::recv_flags::none, false);
    EXPECT_TRUE(env.has_value()) << "no reply";
    if (!env) return {};
    last_payload_ = std::move(env->message.payload);
    return env->message.header;
  }

  // Registers, declares `tensor` and connects srv_ to server rank 0 as this worker.
  void Join(const TensorSpec& tensor) {
    proto::Header reg;
    reg.set_type(proto::REGISTER);
    reg.set_role(proto::WORKER);
    proto::Header reply = Call(sched_, reg);
    ASSERT_EQ(reply.type(), proto::REGISTER_REPLY);
    me_ = reply.node();
    ASSERT_EQ(Next(sched_).type(), proto::CLUSTER_VIEW);
    proto::Header declare;
    declare.set_type(proto::DECLARE_TENSORS);
    declare.set_sender(me_);
    *declare.add_tensors() = ToProto(tensor);
    reply = Call(sched_, declare);
    ASSERT_EQ(reply.type(), proto::SHARD_MAP) << reply.error_message();
    auto map = ShardMapFromProto(reply.shard_map());
    ASSERT_TRUE(map.ok());
    map_ = std::move(*map);
    // Server rank 0's address is in the cluster view a retried REGISTER returns too.
    proto::Header again = Call(sched_, reg);
    ASSERT_EQ(again.type(), proto::REGISTER_REPLY);
    proto::Header v = Next(sched_);
    ASSERT_EQ(v.type(), proto::CLUSTER_VIEW);
    for (const auto& n : v.view().nodes()) {
      if (n.role() == proto::SERVER && n.rank() == 0) address0_ = n.address();
    }
    ASSERT_FALSE(address0_.empty());
    srv_.set(zmq::sockopt::routing_id, NodeIdentity(me_));
    srv_.set(zmq::sockopt::linger, 0);
    srv_.set(zmq::sockopt::rcvtimeo, 20000);
    srv_.connect(address0_);
  }

  zmq::context_t ctx_{1};
  zmq::socket_t sched_{ctx_, zmq::socket_type::dealer};
  zmq::socket_t srv_{ctx_, zmq::socket_type::dealer};
  int32_t me_ = -1;
  std::optional<ShardMap> map_;
  std::string address0_;
  std::vector<zmq::message_t> last_payload_;
};

// A cluster of `servers` servers and two workers, the raw one and a real client (partitions of
// 1000 floats, plain SGD at lr 1 from zeros, no heartbeat timeout while the test talks).
ClusterOptions RawClusterOptions(int servers) {
  return {.servers = servers,
          .workers = 2,
          .scheduler_flags = {"--partition_bytes=4000", "--heartbeat_timeout_ms=60000"},
          .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1"}};
}

// The real client beside the raw worker: Connect and DeclareTensors wait for both, so it joins
// on its own thread.
std::future<std::unique_ptr<Client>> JoinRealClient(LocalCluster& cluster,
                                                    const std::vector<TensorSpec>& tensors,
                                                    const std::string& transport = "auto") {
  return std::async(std::launch::async, [&cluster, tensors, transport] {
    ClientOptions options = cluster.ClientOpts();
    options.transport = transport;
    auto c = Client::Connect(options);
    EXPECT_TRUE(c.ok());
    EXPECT_TRUE((*c)->DeclareTensors(tensors).ok());
    return std::move(*c);
  });
}

// Server rank 0's address, as `hetps status --json` gives it (empty, the test failed, if not).
std::string FirstServerAddress(LocalCluster& cluster) {
  auto status = RunCaptured({Bin("hetps"), "status", "--json", "--scheduler=" + cluster.endpoint()},
                            /*search_path=*/false);
  EXPECT_TRUE(status.ok() && status->succeeded());
  if (!status.ok() || !status->succeeded()) return "";
  return nlohmann::json::parse(status->output)["servers"][0]["address"];
}

zmq::message_t Floats(int64_t n) { return zmq::message_t(static_cast<size_t>(n) * sizeof(float)); }

// A data request of `sender` about partition 0 of `len` floats, without a payload.
proto::Header PartitionRequest(int32_t sender, proto::MsgType type, int64_t len) {
  proto::Header h;
  h.set_type(type);
  h.set_sender(sender);
  h.set_request_id(5);
  h.set_partition(0);
  h.set_dtype(proto::FLOAT32);
  h.set_num_elements(len);
  return h;
}

void ExpectError(const proto::Header& r, StatusCode code, const char* what) {
  EXPECT_EQ(r.type(), proto::ERROR) << what;
  EXPECT_EQ(r.error(), code) << what << ": " << r.error_message();
  EXPECT_FALSE(r.error_message().empty()) << what;
}

TEST(MalformedTest, BadMessagesGetTypedErrorsAndServingGoesOn) {
  LocalCluster cluster(RawClusterOptions(2));
  const std::vector<TensorSpec> tensors = {{"t", {3000}, 0}};  // 3 partitions of 1000
  auto real = JoinRealClient(cluster, tensors);

  RawWorker raw(cluster.endpoint());
  raw.Join(tensors[0]);
  ASSERT_FALSE(HasFatalFailure());
  const int32_t me = raw.me_;
  const std::optional<ShardMap>& map = raw.map_;
  const std::string& address0 = raw.address0_;
  zmq::socket_t& srv = raw.srv_;
  std::unique_ptr<Client> client = real.get();

  int32_t on0 = -1, on1 = -1;  // a partition on server rank 0, and one on rank 1
  for (const Partition& p : map->partitions()) (p.server_rank == 0 ? on0 : on1) = p.id;
  ASSERT_GE(on0, 0);
  ASSERT_GE(on1, 0);

  auto push = [&](int32_t partition, int64_t n) {
    proto::Header h;
    h.set_type(proto::PUSH);
    h.set_sender(me);
    h.set_request_id(77);
    h.set_partition(partition);
    h.set_dtype(proto::FLOAT32);
    h.set_num_elements(n);
    return h;
  };
  const int64_t len0 = map->partitions()[on0].length;

  // 1. Frame 0 is not a header.
  (void)srv.send(zmq::buffer(std::string("\x08\xff\xff garbage")), zmq::send_flags::none);
  ExpectError(raw.Next(srv), StatusCode::kMalformed, "garbage");
  // 2. No such partition; 3. a partition another server holds.
  {
    std::vector<zmq::message_t> p;
    p.push_back(Floats(10));
    ExpectError(raw.Call(srv, push(9999, 10), std::move(p)), StatusCode::kNotFound, "no partition");
  }
  {
    std::vector<zmq::message_t> p;
    p.push_back(Floats(map->partitions()[on1].length));
    proto::Header r = raw.Call(srv, push(on1, map->partitions()[on1].length), std::move(p));
    ExpectError(r, StatusCode::kNotFound, "other server");
    EXPECT_NE(r.error_message().find("server rank 1"), std::string::npos);
  }
  // 4. Header size disagrees with the partition; 5. payload disagrees with the header;
  // 6. no payload at all; 7. two payload frames.
  {
    std::vector<zmq::message_t> p;
    p.push_back(Floats(len0 - 1));
    ExpectError(raw.Call(srv, push(on0, len0 - 1), std::move(p)), StatusCode::kSizeMismatch,
                "header size");
  }
  {
    std::vector<zmq::message_t> p;
    p.push_back(Floats(len0 - 1));
    ExpectError(raw.Call(srv, push(on0, len0), std::move(p)), StatusCode::kSizeMismatch,
                "short payload");
  }
  ExpectError(raw.Call(srv, push(on0, len0)), StatusCode::kSizeMismatch, "no payload");
  {
    std::vector<zmq::message_t> p;
    p.push_back(Floats(len0));
    p.push_back(Floats(1));
    ExpectError(raw.Call(srv, push(on0, len0), std::move(p)), StatusCode::kSizeMismatch,
                "two frames");
  }
  // 8. Wrong dtype.
  {
    proto::Header h = push(on0, len0);
    h.set_dtype(proto::DTYPE_UNKNOWN);
    std::vector<zmq::message_t> p;
    p.push_back(Floats(len0));
    ExpectError(raw.Call(srv, h, std::move(p)), StatusCode::kDtypeMismatch, "dtype");
  }
  // 9. A message type servers do not take.
  {
    proto::Header h;
    h.set_type(proto::BARRIER);
    h.set_sender(me);
    ExpectError(raw.Call(srv, h), StatusCode::kInvalidArgument, "barrier to a server");
  }
  // 10. Claiming another node's id; 11. a stranger that never registered.
  {
    proto::Header h = push(on0, len0);
    h.set_sender(client->id());
    std::vector<zmq::message_t> p;
    p.push_back(Floats(len0));
    ExpectError(raw.Call(srv, h, std::move(p)), StatusCode::kUnregistered, "spoofed sender");
  }
  {
    zmq::socket_t stranger(raw.ctx_, zmq::socket_type::dealer);
    stranger.set(zmq::sockopt::routing_id, std::string("stranger"));
    stranger.set(zmq::sockopt::linger, 0);
    stranger.set(zmq::sockopt::rcvtimeo, 20000);
    stranger.connect(address0);
    proto::Header h = push(on0, len0);
    h.set_sender(4242);
    ExpectError(raw.Call(stranger, h), StatusCode::kUnregistered, "stranger");
  }
  // 12. Garbage to the scheduler, and a request from a node it never admitted.
  (void)raw.sched_.send(zmq::buffer(std::string("junk")), zmq::send_flags::none);
  ExpectError(raw.Next(raw.sched_), StatusCode::kMalformed, "scheduler garbage");
  {
    zmq::socket_t stranger(raw.ctx_, zmq::socket_type::dealer);
    stranger.set(zmq::sockopt::linger, 0);
    stranger.set(zmq::sockopt::rcvtimeo, 20000);
    stranger.connect(cluster.endpoint());
    proto::Header h;
    h.set_type(proto::BARRIER);
    ExpectError(raw.Call(stranger, h), StatusCode::kUnregistered, "unregistered at scheduler");
  }

  // 13. Compressed payloads: an unknown codec, an encoding of the wrong size, indices outside
  // the partition, and a pull in a codec pulls do not take.
  {
    proto::Header h = push(on0, len0);
    h.set_codec("zip");
    std::vector<zmq::message_t> p;
    p.push_back(Floats(4));
    ExpectError(raw.Call(srv, h, std::move(p)), StatusCode::kInvalidArgument, "unknown codec");
  }
  {
    proto::Header h = push(on0, len0);
    h.set_codec("topk:density=0.01");  // k = 10: 80 bytes
    std::vector<zmq::message_t> p;
    p.push_back(Floats(19));
    ExpectError(raw.Call(srv, h, std::move(p)), StatusCode::kSizeMismatch, "short encoding");
  }
  {
    proto::Header h = push(on0, len0);
    h.set_codec("topk:density=0.01");
    std::vector<uint32_t> bytes(20, 0);
    for (int j = 0; j < 10; ++j) bytes[j] = static_cast<uint32_t>(len0 + j);  // out of range
    std::vector<zmq::message_t> p;
    p.emplace_back(bytes.data(), bytes.size() * 4);
    ExpectError(raw.Call(srv, h, std::move(p)), StatusCode::kMalformed, "index out of range");
  }
  {
    proto::Header h;
    h.set_type(proto::PULL);
    h.set_sender(me);
    h.set_partition(on0);
    h.set_codec("topk:density=0.5");
    ExpectError(raw.Call(srv, h), StatusCode::kInvalidArgument, "pull codec");
  }

  // The server still serves: a valid push from the raw worker, then the real client sees it.
  {
    std::vector<float> ones(len0, 1.0f);
    std::vector<zmq::message_t> p;
    p.emplace_back(ones.data(), ones.size() * sizeof(float));
    proto::Header r = raw.Call(srv, push(on0, len0), std::move(p));
    EXPECT_EQ(r.type(), proto::PUSH_REPLY) << r.error_message();
  }
  std::vector<float> values(3000);
  ASSERT_TRUE(client->Pull("t", values.data(), 3000).Wait().ok());
  const Partition& p0 = map->partitions()[on0];
  EXPECT_EQ(values[p0.offset], -1.0f);  // zeros - lr * 1
  EXPECT_EQ(values[p0.offset + p0.length - 1], -1.0f);
  ASSERT_TRUE(client->Push("t", values.data(), 3000).Wait().ok());

  proto::Header leave;
  leave.set_type(proto::LEAVE);
  leave.set_sender(me);
  EXPECT_EQ(raw.Call(raw.sched_, leave).type(), proto::LEAVE);
  EXPECT_TRUE(client->Finish().ok());
}

// The co-located transport: what a worker names in SHM_ATTACH and in a request's shared memory
// slot is checked before the server touches it; every bad one gets a typed error, the server
// goes on serving, and good slots carry a push and a pull's reply.
TEST(MalformedTest, SharedMemorySlotsAreCheckedAndServingGoesOn) {
  LocalCluster cluster(RawClusterOptions(1));
  const std::vector<TensorSpec> tensors = {{"t", {1000}, 0}};  // 1 partition
  auto real = JoinRealClient(cluster, tensors, "shm");
  RawWorker raw(cluster.endpoint());
  raw.Join(tensors[0]);
  ASSERT_FALSE(HasFatalFailure());
  std::unique_ptr<Client> client = real.get();
  const int64_t len = 1000, bytes = len * 4;
  const std::string name = "/hetps-malformed-" + std::to_string(getpid());
  auto segment = ShmSegment::Create(name, 1 << 20);
  ASSERT_TRUE(segment.ok()) << segment.status().ToString();
  ASSERT_TRUE((*segment)->Reserve(1 << 20).ok());

  auto request = [&](proto::MsgType type, int64_t offset, int64_t length) {
    proto::Header h = PartitionRequest(raw.me_, type, len);
    h.set_shm_offset(offset);
    h.set_shm_length(length);
    return h;
  };
  auto attach = [&](const std::string& shm_name, int64_t size) {
    proto::Header h;
    h.set_type(proto::SHM_ATTACH);
    h.set_sender(raw.me_);
    h.set_shm_name(shm_name);
    h.set_shm_length(size);
    return raw.Call(raw.srv_, h);
  };

  // Slots before any segment was mapped; segments that are not ours, missing or mis-sized.
  ExpectError(raw.Call(raw.srv_, request(proto::PUSH, 0, bytes)), StatusCode::kFailedPrecondition,
              "slot without a segment");
  ExpectError(attach("/etc/passwd", 1 << 20), StatusCode::kInvalidArgument, "a foreign name");
  ExpectError(attach(name + "-missing", 1 << 20), StatusCode::kUnavailable, "a missing segment");
  ExpectError(attach(name, 4096), StatusCode::kInvalidArgument, "a wrong size");
  ExpectError(attach(name, -1), StatusCode::kInvalidArgument, "a negative size");
  ASSERT_EQ(attach(name, 1 << 20).type(), proto::SHM_ATTACH_REPLY);

  // Slots outside the segment, overflowing it, negative, with a frame besides; a pull whose
  // slot is not the partition's size.
  ExpectError(raw.Call(raw.srv_, request(proto::PUSH, (1 << 20) - 64, bytes)),
              StatusCode::kMalformed, "slot past the end");
  ExpectError(raw.Call(raw.srv_, request(proto::PUSH, INT64_MAX - 8, bytes)),
              StatusCode::kMalformed, "offset overflowing");
  ExpectError(raw.Call(raw.srv_, request(proto::PUSH, -64, bytes)), StatusCode::kMalformed,
              "negative offset");
  ExpectError(raw.Call(raw.srv_, request(proto::PUSH, 0, -bytes)), StatusCode::kMalformed,
              "negative length");
  {
    std::vector<zmq::message_t> p;
    p.push_back(Floats(len));
    ExpectError(raw.Call(raw.srv_, request(proto::PUSH, 0, bytes), std::move(p)),
                StatusCode::kMalformed, "slot and frame");
  }
  ExpectError(raw.Call(raw.srv_, request(proto::PUSH, 0, bytes - 4)), StatusCode::kSizeMismatch,
              "short push slot");
  ExpectError(raw.Call(raw.srv_, request(proto::PULL, 0, bytes - 4)), StatusCode::kSizeMismatch,
              "short pull slot");

  // Good slots: a push of ones read from the segment, then a pull written into it.
  float* slot = reinterpret_cast<float*>((*segment)->data() + 4096);
  std::fill(slot, slot + len, 1.0f);
  proto::Header r = raw.Call(raw.srv_, request(proto::PUSH, 4096, bytes));
  ASSERT_EQ(r.type(), proto::PUSH_REPLY) << r.error_message();
  float* into = reinterpret_cast<float*>((*segment)->data() + 65536);
  std::fill(into, into + len, 7.0f);
  r = raw.Call(raw.srv_, request(proto::PULL, 65536, bytes));
  ASSERT_EQ(r.type(), proto::PULL_REPLY) << r.error_message();
  EXPECT_EQ(r.shm_length(), bytes);
  EXPECT_TRUE(raw.last_payload_.empty());
  EXPECT_EQ(into[0], -1.0f);
  EXPECT_EQ(into[len - 1], -1.0f);

  // The real client, through its own segment, sees the same.
  std::vector<float> values(len);
  ASSERT_TRUE(client->Pull("t", values.data(), len).Wait().ok());
  EXPECT_EQ(values[0], -1.0f);
  EXPECT_EQ(values[len - 1], -1.0f);
  EXPECT_EQ(client->stats().shared_memory_bytes, bytes);

  proto::Header leave;
  leave.set_type(proto::LEAVE);
  leave.set_sender(raw.me_);
  EXPECT_EQ(raw.Call(raw.sched_, leave).type(), proto::LEAVE);
  EXPECT_TRUE(client->Finish().ok());
}

// Cross memory attach (server/cma_peers.h) from a raw worker, this test process: a claim is
// checked (a pid that is not the worker's, another pid namespace, a probe not put where it was
// said or not the one given), a request's address and size are the server's to check (an
// address the worker does not map fails that request only), and after CMA_REVOKE nothing is
// read or written. Serving goes on throughout.
TEST(MalformedTest, CrossMemoryClaimsAndAddressesAreCheckedAndServingGoesOn) {
  LocalCluster cluster(RawClusterOptions(1));
  const std::vector<TensorSpec> tensors = {{"t", {1000}, 0}};  // 1 partition
  auto real = JoinRealClient(cluster, tensors, "socket");
  RawWorker raw(cluster.endpoint());
  raw.Join(tensors[0]);
  ASSERT_FALSE(HasFatalFailure());
  std::unique_ptr<Client> client = real.get();
  const int64_t len = 1000, bytes = len * 4;
  std::vector<uint64_t> probe(2, 0);
  const auto probe_at = reinterpret_cast<uintptr_t>(probe.data());

  auto request = [&](proto::MsgType type, uint64_t address, int64_t length) {
    proto::Header h = PartitionRequest(raw.me_, type, len);
    h.set_cma_address(address);
    h.set_cma_length(length);
    return h;
  };
  auto claim = [&](int64_t pid, uint64_t pid_namespace, uint64_t answer = 0) {
    proto::Header h;
    h.set_type(proto::CMA_ATTACH);
    h.set_sender(raw.me_);
    h.set_cma_pid(pid);
    h.set_pid_namespace(pid_namespace);
    h.set_cma_address(probe_at);
    h.set_cma_probe(answer);
    return raw.Call(raw.srv_, h);
  };
  std::vector<float> ones(len, 1.0f), into(len, 7.0f);
  const auto ones_at = reinterpret_cast<uintptr_t>(ones.data());
  const auto into_at = reinterpret_cast<uintptr_t>(into.data());

  // Requests naming memory before any attach.
  ExpectError(raw.Call(raw.srv_, request(proto::PULL, into_at, bytes)), StatusCode::kMalformed,
              "not attached");
  // Claims: no pid, another pid namespace, an answer to no challenge.
  const int64_t me = getpid();
  ExpectError(claim(0, PidNamespace()), StatusCode::kInvalidArgument, "pid 0");
  ExpectError(claim(me, PidNamespace() + 1), StatusCode::kFailedPrecondition, "another namespace");
  ExpectError(claim(me, PidNamespace(), 12345), StatusCode::kFailedPrecondition, "no challenge");
  // A process that is not the worker: its memory does not hold the probe.
  struct Reaped {  // killed and reaped however the test ends
    pid_t pid;
    ~Reaped() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  };
  auto spawned = Spawn({"/bin/sleep", "30"});
  ASSERT_TRUE(spawned.ok()) << spawned.status().ToString();
  const Reaped other{*spawned};
  proto::Header r = claim(other.pid, PidNamespace());
  ASSERT_EQ(r.type(), proto::CMA_ATTACH_REPLY) << r.error_message();
  probe[0] = r.cma_probe();
  r = claim(other.pid, PidNamespace(), r.cma_probe());
  EXPECT_EQ(r.type(), proto::ERROR) << "another process passed for the worker";
  // The worker itself, but the probe not put there, or a wrong one given back.
  probe[0] = 0;
  r = claim(me, PidNamespace());
  ASSERT_EQ(r.type(), proto::CMA_ATTACH_REPLY) << r.error_message();
  ExpectError(claim(me, PidNamespace(), r.cma_probe()), StatusCode::kFailedPrecondition,
              "probe not in place");
  r = claim(me, PidNamespace());
  probe[0] = r.cma_probe();
  ExpectError(claim(me, PidNamespace(), r.cma_probe() + 1), StatusCode::kFailedPrecondition,
              "a wrong probe");
  EXPECT_EQ(probe[1], 0u) << "written before the claim was proven";
  // A proven claim.
  r = claim(me, PidNamespace());
  probe[0] = r.cma_probe();
  r = claim(me, PidNamespace(), r.cma_probe());
  ASSERT_EQ(r.type(), proto::CMA_ATTACH_REPLY) << r.error_message();
  EXPECT_GT(r.cma_pid(), 0);
  EXPECT_EQ(probe[1], ~probe[0]) << "the server wrote the probe's complement";

  // A frame besides, wrong sizes, addresses this process does not map.
  {
    std::vector<zmq::message_t> p;
    p.push_back(Floats(len));
    ExpectError(raw.Call(raw.srv_, request(proto::PUSH, ones_at, bytes), std::move(p)),
                StatusCode::kMalformed, "address and frame");
  }
  ExpectError(raw.Call(raw.srv_, request(proto::PUSH, ones_at, -bytes)), StatusCode::kMalformed,
              "negative length");
  ExpectError(raw.Call(raw.srv_, request(proto::PUSH, ones_at, bytes - 4)),
              StatusCode::kSizeMismatch, "short push");
  ExpectError(raw.Call(raw.srv_, request(proto::PULL, into_at, bytes + 4)),
              StatusCode::kSizeMismatch, "long pull");
  ExpectError(raw.Call(raw.srv_, request(proto::PUSH, 64, bytes)), StatusCode::kInvalidArgument,
              "push from an unmapped address");
  ExpectError(raw.Call(raw.srv_, request(proto::PULL, 64, bytes)), StatusCode::kInvalidArgument,
              "pull into an unmapped address");

  // Good requests: a push of ones read from this process, a pull written into it.
  r = raw.Call(raw.srv_, request(proto::PUSH, ones_at, bytes));
  ASSERT_EQ(r.type(), proto::PUSH_REPLY) << r.error_message();
  r = raw.Call(raw.srv_, request(proto::PULL, into_at, bytes));
  ASSERT_EQ(r.type(), proto::PULL_REPLY) << r.error_message();
  EXPECT_EQ(r.cma_length(), bytes);
  EXPECT_TRUE(raw.last_payload_.empty());
  EXPECT_EQ(into[0], -1.0f);
  EXPECT_EQ(into[len - 1], -1.0f);

  // Revoked: nothing is touched any more.
  proto::Header revoke;
  revoke.set_type(proto::CMA_REVOKE);
  revoke.set_sender(raw.me_);
  EXPECT_EQ(raw.Call(raw.srv_, revoke).type(), proto::CMA_REVOKE_REPLY);
  std::fill(into.begin(), into.end(), 7.0f);
  ExpectError(raw.Call(raw.srv_, request(proto::PULL, into_at, bytes)), StatusCode::kMalformed,
              "revoked");
  EXPECT_EQ(into[0], 7.0f);

  // The real client, on its socket, sees the one push.
  std::vector<float> values(len);
  ASSERT_TRUE(client->Pull("t", values.data(), len).Wait().ok());
  EXPECT_EQ(values[0], -1.0f);
  EXPECT_EQ(values[len - 1], -1.0f);
  proto::Header leave;
  leave.set_type(proto::LEAVE);
  leave.set_sender(raw.me_);
  EXPECT_EQ(raw.Call(raw.sched_, leave).type(), proto::LEAVE);
  EXPECT_TRUE(client->Finish().ok());
}

// Batches (common/batch.h) from a raw worker: a malformed one is refused whole with MALFORMED,
// a part that is wrong on its own gets its own error inside the batch of answers, and the
// server goes on serving, the real client too.
TEST(MalformedTest, MalformedBatchesAreRefusedAndServingGoesOn) {
  LocalCluster cluster(RawClusterOptions(1));
  const std::vector<TensorSpec> tensors = {{"t", {1000}, 0}};  // 1 partition
  auto real = JoinRealClient(cluster, tensors);
  RawWorker raw(cluster.endpoint());
  raw.Join(tensors[0]);
  ASSERT_FALSE(HasFatalFailure());
  std::unique_ptr<Client> client = real.get();
  const int64_t len = 1000;

  auto part = [&](proto::MsgType type, uint64_t id, int32_t partition) {
    proto::Header h;
    h.set_type(type);
    h.set_sender(raw.me_);
    h.set_request_id(id);
    h.set_partition(partition);
    h.set_dtype(proto::FLOAT32);
    h.set_num_elements(len);
    return h;
  };
  auto batch_of = [&](std::vector<proto::Header> parts, std::vector<uint32_t> frames) {
    proto::Header b;
    b.set_type(proto::BATCH);
    b.set_sender(raw.me_);
    b.set_request_id(99);
    for (proto::Header& h : parts) *b.add_batch() = std::move(h);
    for (uint32_t f : frames) b.add_batch_frames(f);
    return b;
  };
  auto frames = [&](int n) {
    std::vector<zmq::message_t> p;
    for (int i = 0; i < n; ++i) p.push_back(Floats(len));
    return p;
  };
  auto expect_malformed = [&](const proto::Header& r, const char* what) {
    EXPECT_EQ(r.type(), proto::ERROR) << what;
    EXPECT_EQ(r.error(), StatusCode::kMalformed) << what << ": " << r.error_message();
    EXPECT_EQ(r.request_id(), 99u) << what;
  };

  expect_malformed(
      raw.Call(raw.srv_, batch_of({part(proto::PUSH, 1, 0), part(proto::PUSH, 2, 0)}, {1, 1}),
               frames(1)),
      "fewer frames than named");
  expect_malformed(raw.Call(raw.srv_, batch_of({part(proto::PUSH, 1, 0)}, {1, 0}), frames(1)),
                   "a count without a part");
  expect_malformed(
      raw.Call(raw.srv_, batch_of({part(proto::PULL, 1, 0), batch_of({}, {})}, {0, 0})),
      "a batch inside a batch");
  expect_malformed(raw.Call(raw.srv_, batch_of({}, {})), "no parts");
  {
    std::vector<proto::Header> many;
    std::vector<uint32_t> counts;
    for (int i = 0; i <= kMaxBatchParts; ++i) {
      many.push_back(part(proto::PULL, 1000 + i, 0));
      counts.push_back(0);
    }
    expect_malformed(raw.Call(raw.srv_, batch_of(std::move(many), std::move(counts))),
                     "too many parts");
  }

  // A good batch with one bad part: a push, a pull of a partition that does not exist, a pull.
  // The answers come back as one batch, in order, the bad part with its own error.
  ASSERT_TRUE(
      Send(raw.srv_,
           batch_of({part(proto::PUSH, 1, 0), part(proto::PULL, 2, 7), part(proto::PULL, 3, 0)},
                    {1, 0, 0}),
           frames(1)));
  auto env = Receive(raw.srv_, zmq::recv_flags::none, /*routed=*/false);
  ASSERT_TRUE(env.has_value());
  ASSERT_TRUE(IsBatch(*env)) << env->message.header.DebugString();
  std::vector<Envelope> answers;
  ASSERT_TRUE(Unbatch(*env, answers).ok());
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[0].message.header.type(), proto::PUSH_REPLY);
  EXPECT_EQ(answers[1].message.header.type(), proto::ERROR);
  EXPECT_EQ(answers[1].message.header.error(), StatusCode::kNotFound);
  EXPECT_EQ(answers[1].message.header.request_id(), 2u);
  EXPECT_EQ(answers[2].message.header.type(), proto::PULL_REPLY);
  ASSERT_EQ(answers[2].message.payload.size(), 1u);
  EXPECT_EQ(answers[2].message.payload[0].size(), static_cast<size_t>(len) * sizeof(float));

  // The real client is served as before.
  std::vector<float> values(len);
  ASSERT_TRUE(client->Pull(std::vector<Client::TensorView>{{"t", values.data(), len}}).Wait().ok());

  proto::Header leave;
  leave.set_type(proto::LEAVE);
  leave.set_sender(raw.me_);
  EXPECT_EQ(raw.Call(raw.sched_, leave).type(), proto::LEAVE);
  EXPECT_TRUE(client->Finish().ok());
}

// The peak resident memory of process `pid` (VmHWM), in bytes; -1 when unknown.
// A sparse table's requests (docs/tables.md) are checked against the table before anything is
// read: keys and rows of mismatched length, a key count that would overflow, a codec, an INIT;
// each gets its typed error and the server serves the next request.
TEST(MalformedTest, BadTableRequestsGetTypedErrorsAndServingGoesOn) {
  LocalCluster cluster(RawClusterOptions(1));
  const std::vector<TensorSpec> tensors = {{"emb", {4}, 0, {.dim = 4, .init = "zeros"}}};
  auto real = JoinRealClient(cluster, tensors);
  RawWorker raw(cluster.endpoint());
  raw.Join(tensors[0]);
  ASSERT_FALSE(HasFatalFailure());
  std::unique_ptr<Client> client = real.get();
  const int32_t bucket = raw.map_->PartitionsOf(0)[0];
  auto request = [&](proto::MsgType type, int64_t keys, int64_t floats) {
    proto::Header h;
    h.set_type(type);
    h.set_sender(raw.me_);
    h.set_request_id(9);
    h.set_partition(bucket);
    h.set_dtype(proto::FLOAT32);
    h.set_num_keys(keys);
    h.set_num_elements(floats);
    return h;
  };
  auto frame = [](size_t bytes) {
    std::vector<zmq::message_t> p;
    p.emplace_back(bytes);
    std::memset(p.back().data(), 0, bytes);
    return p;
  };
  zmq::socket_t& srv = raw.srv_;
  // 2 keys, but the frame holds rows for 1; the header's floats disagree with the keys.
  ExpectError(raw.Call(srv, request(proto::PUSH, 2, 8), frame(2 * 8 + 4 * 4)),
              StatusCode::kSizeMismatch, "rows of one key for two");
  ExpectError(raw.Call(srv, request(proto::PUSH, 2, 7), frame(2 * 8 + 8 * 4)),
              StatusCode::kSizeMismatch, "floats against keys");
  // A key count whose sizes would overflow; a negative one.
  ExpectError(raw.Call(srv, request(proto::PUSH, int64_t{1} << 61, 4), frame(16)),
              StatusCode::kInvalidArgument, "overflowing count");
  ExpectError(raw.Call(srv, request(proto::PULL, -1, 0), frame(0)), StatusCode::kInvalidArgument,
              "negative count");
  // A pull whose keys frame is short; a push with a codec; an INIT of a table.
  ExpectError(raw.Call(srv, request(proto::PULL, 3, 0), frame(16)), StatusCode::kSizeMismatch,
              "short keys");
  proto::Header coded = request(proto::PUSH, 1, 4);
  coded.set_codec("fp16");
  ExpectError(raw.Call(srv, coded, frame(8 + 16)), StatusCode::kInvalidArgument, "codec");
  ExpectError(raw.Call(srv, request(proto::INIT, 1, 4), frame(8 + 16)),
              StatusCode::kInvalidArgument, "init");
  // Serving goes on: a well-formed push and pull of the raw worker, and the real client's.
  uint64_t key = 0;
  while (raw.map_->TablePartition(0, key) != bucket) ++key;
  std::vector<zmq::message_t> good = frame(8 + 16);
  std::memcpy(good[0].data(), &key, 8);
  static_cast<float*>(good[0].data())[2] = 2.0f;  // the key's row: (2, 0, 0, 0)
  proto::Header r = raw.Call(srv, request(proto::PUSH, 1, 4), std::move(good));
  ASSERT_EQ(r.type(), proto::PUSH_REPLY) << r.error_message();
  std::vector<float> row(4);
  ASSERT_TRUE(client->PullRows("emb", &key, 1, row.data()).Wait().ok());
  EXPECT_EQ(row, (std::vector<float>{-2, 0, 0, 0}));
}

int64_t PeakResidentBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// Sends one frame of `bytes` (never touched, so the sender holds no memory for it) to
// `endpoint` and waits until it has left.
void SendHugeFrame(zmq::context_t& ctx, const std::string& endpoint, size_t bytes) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 10000);
  s.connect(endpoint);
  zmq::message_t frame(bytes);
  (void)s.send(frame, zmq::send_flags::none);
  s.close();  // lingers until the frame left, or its connection was closed
}

// A frame larger than a server reads (twice --max_partition_bytes, plus 64 KiB) or than the
// scheduler reads (64 MiB) closes its connection before it is read: neither process's peak
// memory grows by it, and both go on serving the real client.
TEST(MalformedTest, OversizedFramesCloseTheirConnectionUnread) {
  LocalCluster cluster(
      {.servers = 1,
       .workers = 1,
       .scheduler_flags = {"--partition_bytes=65536"},
       .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1", "--max_partition_bytes=1048576"}});
  auto client = Client::Connect(cluster.ClientOpts());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->DeclareTensors({{"t", {1000}, 0}}).ok());
  const std::string server = FirstServerAddress(cluster);
  ASSERT_FALSE(server.empty());

  const pid_t server_pid = cluster.server(0).pid(), scheduler_pid = cluster.scheduler().pid();
  const int64_t server_before = PeakResidentBytes(server_pid);
  const int64_t scheduler_before = PeakResidentBytes(scheduler_pid);
  ASSERT_GT(server_before, 0);
  constexpr size_t kHuge = size_t{512} << 20;
  zmq::context_t ctx(1);
  SendHugeFrame(ctx, server, kHuge);
  SendHugeFrame(ctx, cluster.endpoint(), kHuge);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(PeakResidentBytes(server_pid) - server_before, int64_t{64} << 20);
  EXPECT_LT(PeakResidentBytes(scheduler_pid) - scheduler_before, int64_t{64} << 20);

  std::vector<float> ones(1000, 1.0f), values(1000);
  ASSERT_TRUE((*client)->Push("t", ones.data(), 1000).Wait().ok());
  ASSERT_TRUE((*client)->Pull("t", values.data(), 1000).Wait().ok());
  EXPECT_EQ(values[0], -1.0f);
  EXPECT_EQ(values[999], -1.0f);
  EXPECT_TRUE((*client)->Finish().ok());
}

// Registrations on new connection after new connection from one address: beyond the burst the
// scheduler answers UNAVAILABLE with when to ask again, admits one more once a token is back,
// and the cluster goes on (a real worker joining later gets in by asking again).
TEST(MalformedTest, RegistrationsFromOneAddressAreRateLimited) {
  LocalCluster cluster({.servers = 1,
                        .workers = 1,
                        .scheduler_flags = {"--join_burst=4", "--join_rate=0.5"},
                        .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1"}});
  auto client = Client::Connect(cluster.ClientOpts());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->DeclareTensors({{"t", {1000}, 0}}).ok());
  zmq::context_t ctx(1);
  auto register_once = [&](int i) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 10000);
    s.set(zmq::sockopt::routing_id, "churn-" + std::to_string(i));
    s.connect(cluster.endpoint());
    proto::Header reg;
    reg.set_type(proto::REGISTER);
    reg.set_role(proto::WORKER);
    reg.set_request_id(7);
    EXPECT_TRUE(Send(s, reg));
    for (int k = 0; k < 4; ++k) {  // its answer (a view may come first)
      auto env = Receive(s, zmq::recv_flags::none, false);
      if (!env) break;
      if (env->message.header.request_id() == 7) return env->message.header;
    }
    return proto::Header();
  };
  // The server and the client took 2 of the 4 (and one more may have come back since, two on a
  // slow machine).
  int admitted = 0;
  proto::Header refusal;
  for (int i = 0; i < 6; ++i) {
    proto::Header h = register_once(i);
    if (h.type() == proto::REGISTER_REPLY) {
      ++admitted;
    } else if (refusal.type() == proto::MSG_UNKNOWN) {
      refusal = h;
    }
  }
  EXPECT_GE(admitted, 2);
  EXPECT_LE(admitted, 4);
  ASSERT_EQ(refusal.type(), proto::ERROR) << refusal.DebugString();
  EXPECT_EQ(refusal.error(), StatusCode::kUnavailable);
  EXPECT_NE(refusal.error_message().find("too many registrations from 127.0.0.1"),
            std::string::npos)
      << refusal.error_message();
  EXPECT_NE(refusal.error_message().find("retry in"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));  // a token back
  EXPECT_EQ(register_once(100).type(), proto::REGISTER_REPLY);
  EXPECT_NE(register_once(101).type(), proto::REGISTER_REPLY);

  // The cluster serves on; a worker that comes now waits for its token and joins.
  auto late = Client::Connect(cluster.ClientOpts());
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  std::vector<float> ones(1000, 1.0f), values(1000);
  ASSERT_TRUE((*client)->Push("t", ones.data(), 1000).Wait().ok());
  ASSERT_TRUE((*client)->Pull("t", values.data(), 1000).Wait().ok());
  EXPECT_EQ(values[0], -1.0f);
}

// Raw TCP connections that never finish their handshake, more than the scheduler and the server
// take from one address: those beyond the limit are closed at once (the peer reads the end of
// the stream), the rest stay until the handshake times out; the real worker's connections,
// open before, are untouched, and a new worker gets in once the stalled ones are gone.
TEST(MalformedTest, ConnectionsFromOneAddressAreLimited) {
  ScratchDir dir("hetps-guard");
  std::filesystem::create_directories(dir.path());
  const std::string log = (dir.path() / "cluster.log").string();
  LocalCluster cluster(
      {.servers = 1,
       .workers = 1,
       .scheduler_flags = {"--max_connections_per_address=12", "--http_port=0"},
       .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1", "--max_connections_per_address=12"},
       .log_file = log});
  auto client = Client::Connect(cluster.ClientOpts());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->DeclareTensors({{"t", {1000}, 0}}).ok());
  const std::string server = FirstServerAddress(cluster);
  ASSERT_FALSE(server.empty());

  // Stalled connections to `endpoint` (tcp://127.0.0.1:PORT): how many the other end closed.
  auto stall = [](const std::string& endpoint, int count, std::vector<int>& fds) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port =
        htons(static_cast<uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1))));
    const uint8_t greeting[] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f};
    for (int i = 0; i < count; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
      ASSERT_EQ(write(fd, greeting, sizeof(greeting)), static_cast<ssize_t>(sizeof(greeting)));
      fds.push_back(fd);
    }
  };
  auto closed = [](const std::vector<int>& fds) {
    int n = 0;
    for (int fd : fds) {
      char buf[256];
      ssize_t r;
      while ((r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
      }
      n += r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
    return n;
  };
  for (const std::string& endpoint : {cluster.endpoint(), server}) {
    std::vector<int> fds;
    stall(endpoint, 30, fds);
    // The scheduler holds the server's and the worker's connections, the server the worker's
    // (and the status command's are gone): 18 to 20 of the 30 are over the limit.
    int n = 0;
    for (int i = 0; i < 50 && (n = closed(fds)) < 18; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_GE(n, 18) << endpoint;
    EXPECT_LE(n, 20) << endpoint;
    for (int fd : fds) close(fd);
  }
  for (int i = 0; i < 50 && Slurp(log).find("server: refused a connection") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the log is written in blocks
  }
  const std::string text = Slurp(log);
  EXPECT_NE(text.find("scheduler: refused a connection from 127.0.0.1:"), std::string::npos)
      << text;
  EXPECT_NE(text.find("server: refused a connection from 127.0.0.1:"), std::string::npos) << text;
  EXPECT_NE(text.find("open from that address, at most 12"), std::string::npos);
  // Both counts reach /metrics (the server's with its next report).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("status on http://127.0.0.1:([0-9]+)/")));
  httplib::Client http("127.0.0.1", std::stoi(m[1]));
  auto refused = [&](const std::string& series) {
    auto r = http.Get("/metrics");
    std::smatch v;
    const std::string body = r ? r->body : "";
    return std::regex_search(body, v, std::regex(series + " ([0-9]+)\n")) ? std::stoi(v[1]) : -1;
  };
  const std::string scheduler_series = R"(hetps_scheduler_refused_total\{what="connection"\})";
  const std::string server_series = R"(hetps_server_connections_refused_total\{server="0",[^}]*\})";
  for (int i = 0; i < 50 && (refused(scheduler_series) < 18 || refused(server_series) < 18); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(refused(scheduler_series), 18);
  EXPECT_LE(refused(scheduler_series), 20);
  EXPECT_GE(refused(server_series), 18);
  EXPECT_LE(refused(server_series), 20);

  std::vector<float> ones(1000, 1.0f), values(1000);
  ASSERT_TRUE((*client)->Push("t", ones.data(), 1000).Wait().ok());
  ASSERT_TRUE((*client)->Pull("t", values.data(), 1000).Wait().ok());
  EXPECT_EQ(values[0], -1.0f);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the stalled ones are counted out
  auto late = Client::Connect(cluster.ClientOpts());
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  ASSERT_TRUE((*late)->DeclareTensors({{"t", {1000}, 0}}).ok());
  ASSERT_TRUE((*late)->Pull("t", values.data(), 1000).Wait().ok());
  EXPECT_EQ(values[0], -1.0f);
}

// A shard map with a partition larger than --max_partition_bytes stops the server, saying
// which setting to change, instead of serving a partition whose pushes it could never read.
TEST(MalformedTest, AServerRefusesPartitionsLargerThanItReads) {
  LocalCluster cluster(
      {.servers = 1, .workers = 1, .server_flags = {"--max_partition_bytes=4096"}});
  auto client = Client::Connect(cluster.ClientOpts());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  (void)(*client)->DeclareTensors({{"t", {100000}, 0}});  // partitions of 4 MiB at most
  auto exit = cluster.server(0).WaitExit(std::chrono::seconds(20));
  ASSERT_TRUE(exit.has_value()) << "the server kept running";
  EXPECT_EQ(WEXITSTATUS(*exit), 1);
}

}  // namespace
}  // namespace hetps::testing
