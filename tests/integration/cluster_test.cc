// A real cluster on loopback (scheduler and server processes) driven by in-process clients.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <limits>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "tests/integration/local_cluster.h"

namespace hetps::testing {
namespace {

// Gradient element j pushed by worker i in round r: small integers, so every sum is exact.
float Grad(int i, int r, int64_t j) { return static_cast<float>((i + 1) * ((j + r) % 7 + 1)); }

const std::vector<TensorSpec> kTensors = {
    {"a", {10}, 0}, {"b", {1000, 3}, 1}, {"big", {100000}, 2}};  // big: 7 partitions of 64 KiB

// Run over the socket only, through each co-located transport (worker/transport.h), and
// through a shared memory segment of one partition, where requests that find no free slot go
// on the socket beside those in shared memory.
struct TransportParam {
  std::string name;
  std::string transport;
  int64_t shared_memory_bytes = ClientOptions{}.shared_memory_bytes;
};

void PrintTo(const TransportParam& p, std::ostream* os) { *os << p.name; }

class ClusterTransportTest : public ::testing::TestWithParam<TransportParam> {};

INSTANTIATE_TEST_SUITE_P(Transports, ClusterTransportTest,
                         ::testing::Values(TransportParam{"Tcp", "socket"},
                                           TransportParam{"SharedMemory", "shm"},
                                           TransportParam{"SharedMemoryOfOneSlot", "shm", 65536},
                                           TransportParam{"CrossMemoryAttach", "cma"}),
                         [](const auto& info) { return info.param.name; });

TEST_P(ClusterTransportTest, EveryWorkerPullsTheExactSumOfAllPushes) {
  const int kWorkers = 3, kRounds = 3;
  LocalCluster cluster({.servers = 2,
                        .workers = kWorkers,
                        .scheduler_flags = {"--partition_bytes=65536"},
                        .server_flags = {"--optimizer=sgd:lr=1", "--init=zeros"}});
  auto clients = cluster.ConnectClients(kWorkers, [](ClientOptions& o) {
    o.transport = GetParam().transport;
    o.shared_memory_bytes = GetParam().shared_memory_bytes;
  });
  LocalCluster::RunEach(kWorkers,
                        [&](int i) { ASSERT_TRUE(clients[i]->DeclareTensors(kTensors).ok()); });
  const ShardMap& map = clients[0]->shard_map();
  ASSERT_GT(map.PartitionsOf(map.TensorId("big")).size(), 1u);
  std::vector<int64_t> per_server = map.ServerBytes();
  ASSERT_GT(per_server[0], 0);
  ASSERT_GT(per_server[1], 0);

  LocalCluster::RunEach(kWorkers, [&](int i) {
    Client& c = *clients[i];
    for (int r = 0; r < kRounds; ++r) {
      std::vector<std::vector<float>> grads;
      std::vector<Ticket> tickets;
      for (const TensorSpec& t : kTensors) {
        auto& g = grads.emplace_back(t.NumElements());
        for (int64_t j = 0; j < t.NumElements(); ++j) g[j] = Grad(c.rank(), r, j);
      }
      for (size_t t = 0; t < kTensors.size(); ++t) {
        tickets.push_back(c.Push(kTensors[t].name, grads[t].data(), kTensors[t].NumElements()));
      }
      for (auto& ticket : tickets) ASSERT_TRUE(ticket.Wait().ok());
      ASSERT_TRUE(c.Clock().ok());
    }
    ASSERT_TRUE(c.Barrier().ok());
    for (const TensorSpec& t : kTensors) {
      std::vector<float> values(t.NumElements(), -1.0f);
      ASSERT_TRUE(c.Pull(t.name, values.data(), t.NumElements()).Wait().ok());
      for (int64_t j = 0; j < t.NumElements(); ++j) {
        float want = 0;
        for (int w = 0; w < kWorkers; ++w) {
          for (int r = 0; r < kRounds; ++r) want -= Grad(w, r, j);
        }
        ASSERT_EQ(values[j], want) << t.name << "[" << j << "] on worker " << i;
      }
    }
    EXPECT_EQ(c.clock(), kRounds);
    const int64_t model_bytes = (10 + 3000 + 100000) * 4;
    EXPECT_EQ(c.stats().bytes_pushed, kRounds * model_bytes);
    EXPECT_EQ(c.stats().bytes_pulled, model_bytes);
    const int64_t shared = c.stats().shared_memory_bytes;
    const TransportParam& p = GetParam();
    if (p.transport == "socket") {
      EXPECT_EQ(shared, 0);
    } else if (p.transport == "cma") {
      // Requests of 16 KiB or more: big's partitions; a and b (12000 bytes) stay in frames.
      EXPECT_EQ(shared, (kRounds + 1) * 100000 * 4) << "the large partitions skipped the socket";
    } else if (p.shared_memory_bytes == ClientOptions{}.shared_memory_bytes) {
      EXPECT_EQ(shared, (kRounds + 1) * model_bytes) << "every payload went through shared memory";
    } else {
      EXPECT_GT(shared, 0);
      EXPECT_LT(shared, (kRounds + 1) * model_bytes) << "one slot cannot hold all in flight";
    }
  });
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
  // Once every worker left, the scheduler shuts the servers down and everyone exits cleanly.
  for (int s = 0; s < 2; ++s) {
    auto st = cluster.server(s).WaitExit(std::chrono::seconds(10));
    ASSERT_TRUE(st.has_value());
    EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  }
  auto st = cluster.scheduler().WaitExit(std::chrono::seconds(10));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(WEXITSTATUS(*st), 0);
}

// ClientOptions::caller_io: threads that share one client, each pushing while others wait,
// hand tickets to one another, or never wait at all, only polling Done(); two threads wait on
// one pull. With callers driving the sockets (true) a waiting thread handles replies meant for
// others, and the I/O thread those nobody waits for; with false, the I/O thread handles all.
class CallerIoTest : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(Io, CallerIoTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Caller" : "Thread"; });

TEST_P(CallerIoTest, ThreadsSharingAClientAndItsTicketsGetExactSums) {
  const int kThreads = 4, kRounds = 12;
  LocalCluster cluster({.servers = 2,
                        .workers = 1,
                        .scheduler_flags = {"--partition_bytes=65536"},
                        .server_flags = {"--optimizer=sgd:lr=1", "--init=zeros"}});
  auto clients = cluster.ConnectClients(1, [](ClientOptions& o) { o.caller_io = GetParam(); });
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTensors(kTensors).ok());
  // Per thread, per tensor: its gradient (alive until the end: tickets are handed around).
  std::vector<std::vector<std::vector<float>>> grads(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    for (const TensorSpec& t : kTensors) {
      auto& g = grads[i].emplace_back(t.NumElements());
      for (int64_t j = 0; j < t.NumElements(); ++j) g[j] = Grad(i, 0, j);
    }
  }
  std::mutex mu;
  std::vector<std::vector<Ticket>> handed(kThreads);  // tickets another thread pushed
  std::atomic<int> polled{0};
  LocalCluster::RunEach(kThreads, [&](int i) {
    auto wait_handed = [&] {
      std::vector<Ticket> mine;
      {
        std::lock_guard<std::mutex> lock(mu);
        mine.swap(handed[i]);
      }
      for (const Ticket& t : mine) ASSERT_TRUE(t.Wait().ok());
    };
    for (int r = 0; r < kRounds; ++r) {
      std::vector<Ticket> tickets;
      for (size_t t = 0; t < kTensors.size(); ++t) {
        tickets.push_back(c.Push(kTensors[t].name, grads[i][t].data(), kTensors[t].NumElements()));
      }
      if (r % 3 == 0) {  // nobody waits: whoever drives the sockets completes them
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        for (const Ticket& t : tickets) {
          while (!t.Done()) {
            ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a ticket nobody waits for";
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          ASSERT_TRUE(t.Wait().ok());
        }
        ++polled;
      } else if (r % 3 == 1) {  // waited for by the next thread
        std::lock_guard<std::mutex> lock(mu);
        for (Ticket& t : tickets) handed[(i + 1) % kThreads].push_back(std::move(t));
      } else {
        for (const Ticket& t : tickets) ASSERT_TRUE(t.Wait().ok());
      }
      wait_handed();
    }
  });
  for (int i = 0; i < kThreads; ++i) {  // what was handed after its thread's last look
    for (const Ticket& t : handed[i]) ASSERT_TRUE(t.Wait().ok());
  }
  EXPECT_EQ(polled.load(), kThreads * ((kRounds + 2) / 3));
  // An idle client sleeps: nothing left dirty keeps a turn going.
  const double cpu_before = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LT(ProcessCpuSeconds() - cpu_before, 0.3) << "an idle client spins";
  for (const TensorSpec& t : kTensors) {
    std::vector<float> values(t.NumElements(), -1.0f);
    Ticket pull = c.Pull(t.name, values.data(), t.NumElements());
    LocalCluster::RunEach(2, [&](int) { ASSERT_TRUE(pull.Wait().ok()); });
    for (int64_t j = 0; j < t.NumElements(); ++j) {
      float want = 0;
      for (int i = 0; i < kThreads; ++i) want -= kRounds * Grad(i, 0, j);
      ASSERT_EQ(values[j], want) << t.name << "[" << j << "]";
    }
  }
  const int64_t model_bytes = (10 + 3000 + 100000) * 4;
  EXPECT_EQ(c.stats().bytes_pushed, kThreads * kRounds * model_bytes);
  // Finish answers what is in flight before it leaves (the last LEAVE stops the servers).
  std::vector<Ticket> in_flight;
  for (int r = 0; r < 8; ++r) {
    for (size_t t = 0; t < kTensors.size(); ++t) {
      in_flight.push_back(c.Push(kTensors[t].name, grads[0][t].data(), kTensors[t].NumElements()));
    }
  }
  Ticket last = in_flight.back();
  ASSERT_TRUE(c.Finish().ok());
  for (const Ticket& t : in_flight) {
    EXPECT_TRUE(t.Done());
    EXPECT_TRUE(t.Wait().ok()) << t.Wait().ToString();
  }
  clients.clear();  // the client is gone: its tickets still answer, without driving anything
  EXPECT_TRUE(last.Wait().ok());
  EXPECT_TRUE(last.Done());
}

// Every call during or after Finish() fails at once with a clear status and lets go of the
// caller's buffers: none waits on an I/O loop that no longer runs. Threads that push, pull and
// clock while another thread finishes see each call end (done or failed), never hang.
TEST_P(CallerIoTest, CallsDuringAndAfterFinishFailAtOnce) {
  LocalCluster cluster({.servers = 2, .workers = 1, .server_flags = {"--init=zeros"}});
  auto clients = cluster.ConnectClients(1, [](ClientOptions& o) { o.caller_io = GetParam(); });
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTensors(kTensors).ok());
  std::atomic<bool> finished{false};
  std::atomic<int> failed_after{0};
  std::thread finisher;
  LocalCluster::RunEach(3, [&](int i) {
    std::vector<float> buffer(100000, 1.0f);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    if (i == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ASSERT_TRUE(c.Finish().ok());
      finished = true;
      return;
    }
    while (true) {
      const bool after = finished.load();
      Ticket t =
          i == 1 ? c.Push("big", buffer.data(), 100000) : c.Pull("big", buffer.data(), 100000);
      const Status s = t.Wait();  // returns: done, or failed
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      if (after) {
        ASSERT_FALSE(s.ok()) << "a request after Finish() succeeded";
        ++failed_after;
        return;
      }
    }
  });
  EXPECT_EQ(failed_after.load(), 2);
  std::vector<float> values(100000, 0.0f);
  const auto start = std::chrono::steady_clock::now();
  auto expect_finished = [](const Status& s, const char* call) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << call << ": " << s.ToString();
    EXPECT_NE(s.message().find("Finish()"), std::string::npos) << call << ": " << s.ToString();
  };
  Ticket push = c.Push("big", values.data(), 100000);
  EXPECT_TRUE(push.Done()) << "the buffer was let go of at once";
  expect_finished(push.Wait(), "Push");
  expect_finished(c.Push({{"a", values.data(), 10}, {"big", values.data(), 100000}}).Wait(),
                  "Push of many");
  expect_finished(c.Init("big", values.data(), 100000).Wait(), "Init");
  expect_finished(c.Pull("big", values.data(), 100000).Wait(), "Pull");
  expect_finished(c.Clock(), "Clock");
  expect_finished(c.Barrier(), "Barrier");
  expect_finished(c.AwaitRound().status(), "AwaitRound");
  expect_finished(c.FinishRound().status(), "FinishRound");
  expect_finished(c.AwaitRoundsClosed(1).status(), "AwaitRoundsClosed");
  expect_finished(c.DeclareTensors(kTensors), "DeclareTensors");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_TRUE(c.Finish().ok()) << "Finish is idempotent";
}

// Many small tensors pushed and pulled in one call each (Client::Push/Pull of many tensors),
// batched (the default) or one message per request, under an asynchronous, a synchronous
// (pushes held for their round, the clock's reply waiting for it) and a bounded-staleness
// consistency: every sum is exact, and batching sends a fraction of the messages.
class SmallTensorsTest : public ::testing::TestWithParam<std::tuple<std::string, int64_t>> {};

INSTANTIATE_TEST_SUITE_P(Batching, SmallTensorsTest,
                         ::testing::Combine(::testing::Values("asp", "bsp", "ssp:staleness=1"),
                                            ::testing::Values(int64_t{0},
                                                              ClientOptions{}.batch_bytes)),
                         [](const auto& info) {
                           return fmt::format(
                               "{}_{}", std::get<0>(info.param).substr(0, 3),
                               std::get<1>(info.param) == 0 ? "Unbatched" : "Batched");
                         });

TEST_P(SmallTensorsTest, ExactSumsAndFewerMessages) {
  const auto& [consistency, batch_bytes] = GetParam();
  const int kWorkers = 2, kRounds = 4, kTensorCount = 60;
  std::vector<TensorSpec> tensors;
  for (int t = 0; t < kTensorCount; ++t) {
    tensors.push_back({fmt::format("t{}", t), {50 + t}, t % 4});
  }
  LocalCluster cluster(
      {.servers = 2,
       .workers = kWorkers,
       .server_flags = {"--optimizer=sgd:lr=1", "--init=zeros", "--consistency=" + consistency}});
  auto clients = cluster.ConnectClients(kWorkers, [&](ClientOptions& o) {
    o.batch_bytes = batch_bytes;
    o.transport = "socket";  // the socket carries every payload
  });
  LocalCluster::RunEach(kWorkers,
                        [&](int i) { ASSERT_TRUE(clients[i]->DeclareTensors(tensors).ok()); });
  LocalCluster::RunEach(kWorkers, [&](int i) {
    Client& c = *clients[i];
    std::vector<std::vector<float>> grads(kTensorCount), values(kTensorCount);
    std::vector<Client::ConstTensorView> push;
    std::vector<Client::TensorView> pull;
    for (int t = 0; t < kTensorCount; ++t) {
      grads[t].resize(tensors[t].NumElements());
      values[t].assign(tensors[t].NumElements(), -1.0f);
      push.push_back({tensors[t].name, grads[t].data(), tensors[t].NumElements()});
      pull.push_back({tensors[t].name, values[t].data(), tensors[t].NumElements()});
    }
    for (int r = 0; r < kRounds; ++r) {
      ASSERT_TRUE(c.Pull(pull).Wait().ok());
      for (int t = 0; t < kTensorCount; ++t) {
        for (size_t j = 0; j < grads[t].size(); ++j) grads[t][j] = Grad(c.rank(), r, t + j);
      }
      ASSERT_TRUE(c.Push(push).Wait().ok());
      ASSERT_TRUE(c.Clock().ok());
    }
    ASSERT_TRUE(c.Barrier().ok());
    ASSERT_TRUE(c.Pull(pull).Wait().ok());
    for (int t = 0; t < kTensorCount; ++t) {
      for (size_t j = 0; j < values[t].size(); ++j) {
        float want = 0;
        for (int w = 0; w < kWorkers; ++w) {
          for (int r = 0; r < kRounds; ++r) want -= Grad(w, r, t + j);
        }
        ASSERT_EQ(values[t][j], want) << tensors[t].name << "[" << j << "] on worker " << i;
      }
    }
    // Per round: a pull and a push of every tensor and a clock to each server.
    const ClientStats stats = c.stats();
    EXPECT_EQ(stats.requests, (2 * kRounds + 1) * kTensorCount + kRounds * 2);
    if (batch_bytes == 0) {
      EXPECT_EQ(stats.messages, stats.requests);
    } else {
      EXPECT_LE(stats.messages * 10, stats.requests) << "batches carry many requests each";
    }
  });
  // An unknown tensor among many fails the call at once and sends none of them.
  std::vector<float> buffer(50);
  const int64_t before = clients[0]->stats().requests;
  Status s = clients[0]
                 ->Pull(std::vector<Client::TensorView>{{"t0", buffer.data(), 50},
                                                        {"nope", buffer.data(), 50}})
                 .Wait();
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  s = clients[0]->Push(std::vector<Client::ConstTensorView>{{"t0", buffer.data(), 49}}).Wait();
  EXPECT_EQ(s.code(), StatusCode::kSizeMismatch) << s.ToString();
  EXPECT_EQ(clients[0]->stats().requests, before);
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

// Through a co-located transport only the header travels on the socket, yet a request whose
// values are a batch's worth or more leaves alone, at once (through shared memory: as soon as
// its values are copied, so the server applies it while the next one is copied); small ones
// still share messages.
class CoLocatedTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Transports, CoLocatedTest, ::testing::Values("shm", "cma"));

TEST_P(CoLocatedTest, RequestsOfABatchOrMoreLeaveAlone) {
  LocalCluster cluster({.servers = 1,
                        .workers = 1,
                        .scheduler_flags = {"--partition_bytes=262144"},
                        .server_flags = {"--optimizer=sgd:lr=1", "--init=zeros"}});
  auto clients = cluster.ConnectClients(1, [](ClientOptions& o) {
    o.batch_bytes = 262144;
    o.transport = GetParam();
  });
  Client& c = *clients[0];
  std::vector<TensorSpec> tensors = {{"big", {4 * 65536}, 0}};  // 4 partitions of 256 KiB
  for (int t = 0; t < 20; ++t) tensors.push_back({fmt::format("small{}", t), {100}, 1});
  ASSERT_TRUE(c.DeclareTensors(tensors).ok());
  ASSERT_EQ(c.shard_map().PartitionsOf(c.shard_map().TensorId("big")).size(), 4u);
  std::vector<float> big(4 * 65536, 1.0f);
  ClientStats before = c.stats();
  ASSERT_TRUE(c.Push("big", big.data(), static_cast<int64_t>(big.size())).Wait().ok());
  ASSERT_TRUE(c.Pull("big", big.data(), static_cast<int64_t>(big.size())).Wait().ok());
  ClientStats after = c.stats();
  ASSERT_EQ(after.shared_memory_bytes - before.shared_memory_bytes, 2 * 4 * 262144)
      << "the values skipped the socket";
  EXPECT_EQ(after.requests - before.requests, 8);
  EXPECT_EQ(after.messages - before.messages, 8) << "each large request left alone";
  for (float v : big) ASSERT_EQ(v, -1.0f);
  // Raw bytes an encoder made (held by the client, not the caller) go the same way.
  before = c.stats();
  auto ones = [](const Client::PartitionSlice& slice, std::vector<uint8_t>& out) {
    const std::vector<float> values(static_cast<size_t>(slice.length), 1.0f);
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
    out.assign(bytes, bytes + values.size() * sizeof(float));
    return Status();
  };
  ASSERT_TRUE(c.PushEncoded("big", static_cast<int64_t>(big.size()), ones).Wait().ok());
  EXPECT_EQ(c.stats().shared_memory_bytes - before.shared_memory_bytes, 4 * 262144);
  ASSERT_TRUE(c.Pull("big", big.data(), static_cast<int64_t>(big.size())).Wait().ok());
  for (float v : big) ASSERT_EQ(v, -2.0f);
  std::vector<std::vector<float>> small(20, std::vector<float>(100, 1.0f));
  std::vector<Client::ConstTensorView> views;
  for (int t = 0; t < 20; ++t) views.push_back({fmt::format("small{}", t), small[t].data(), 100});
  before = c.stats();
  ASSERT_TRUE(c.Push(views).Wait().ok());
  after = c.stats();
  EXPECT_EQ(after.requests - before.requests, 20);
  EXPECT_LT(after.messages - before.messages, 20) << "small requests share messages";
  EXPECT_TRUE(c.Finish().ok());
}

// Whether a 16 MiB buffer, the size ZeroMQ allocates for a large message, is served by a
// fresh mmap (page-faulted in, and unmapped again when freed) rather than from the heap.
bool LargeBufferIsMmapped() {
  const size_t before = mallinfo2().hblkhd;
  void* volatile buffer = malloc(16 << 20);
  const bool mmapped = mallinfo2().hblkhd >= before + (16 << 20);
  free(buffer);
  return mmapped;
}

// The transfer tuning is the library's own: any program gets it from Connect, without calling
// anything else, unless it says it manages malloc itself.
TEST(ClusterTest, ConnectTunesMallocForTransfersUnlessTold) {
  LocalCluster cluster({.servers = 1, .workers = 1}), other({.servers = 1, .workers = 1});
  ClientOptions untuned = cluster.ClientOpts();
  untuned.tune_allocator = false;
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 << 10), 1);  // glibc's initial setting
  ASSERT_TRUE(LargeBufferIsMmapped());
  auto kept = Client::Connect(untuned);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_TRUE(LargeBufferIsMmapped()) << "tune_allocator=false changed malloc";
  auto tuned = Client::Connect(other.ClientOpts());
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  EXPECT_FALSE(LargeBufferIsMmapped()) << "Connect left large buffers to fresh mmaps";
  EXPECT_TRUE((*kept)->Finish().ok());
  EXPECT_TRUE((*tuned)->Finish().ok());
}

TEST(ClusterTest, WorkerInitializesAndTheFirstInitWins) {
  LocalCluster cluster({.servers = 2, .workers = 2, .server_flags = {"--init=worker"}});
  auto clients = cluster.ConnectClients(2);
  const std::vector<TensorSpec> tensors = {{"w", {50000}, 0}};
  LocalCluster::RunEach(2, [&](int i) { ASSERT_TRUE(clients[i]->DeclareTensors(tensors).ok()); });
  std::vector<float> out(50000);
  Status before = clients[0]->Pull("w", out.data(), 50000).Wait();
  EXPECT_EQ(before.code(), StatusCode::kFailedPrecondition) << before.ToString();

  std::vector<float> first(50000), second(50000, 9.0f);
  std::iota(first.begin(), first.end(), 0.0f);
  ASSERT_TRUE(clients[0]->Init("w", first.data(), 50000).Wait().ok());
  ASSERT_TRUE(clients[1]->Init("w", second.data(), 50000).Wait().ok());  // no effect
  for (auto& c : clients) {
    ASSERT_TRUE(c->Pull("w", out.data(), 50000).Wait().ok());
    EXPECT_EQ(out, first);
  }
}

TEST(ClusterTest, OptimizerStateLivesOnTheServer) {
  LocalCluster cluster(
      {.servers = 1,
       .workers = 1,
       .server_flags = {"--optimizer=momentum:lr=0.5,momentum=0.5", "--init=zeros"}});
  auto clients = cluster.ConnectClients(1);
  ASSERT_TRUE(clients[0]->DeclareTensors({{"v", {4}, 0}}).ok());
  std::vector<float> g(4, 1.0f), out(4);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(clients[0]->Push("v", g.data(), 4).Wait().ok());
  ASSERT_TRUE(clients[0]->Pull("v", out.data(), 4).Wait().ok());
  // v1 = 1, w1 = -0.5; v2 = 1.5, w2 = -1.25
  EXPECT_EQ(out, std::vector<float>(4, -1.25f));
}

TEST(ClusterTest, PushesCarryTheVersionTheyWereComputedFrom) {
  LocalCluster cluster({.servers = 1,
                        .workers = 1,
                        .server_flags = {"--aggregator=sum:staleness_lr=inverse",
                                         "--optimizer=sgd:lr=1", "--init=zeros"}});
  auto clients = cluster.ConnectClients(1);
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTensors({{"w", {3}, 0}}).ok());
  std::vector<float> w(3), g(3, 4.0f);
  ASSERT_TRUE(c.Pull("w", w.data(), 3).Wait().ok());  // base version 0
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.Push("w", g.data(), 3).Wait().ok());
  // Staleness 0, 1, 2 -> steps 4, 4, 2.
  ASSERT_TRUE(c.Pull("w", w.data(), 3).Wait().ok());
  EXPECT_EQ(w, std::vector<float>(3, -10.0f));
  ASSERT_TRUE(c.Push("w", g.data(), 3).Wait().ok());  // fresh again: staleness 0
  ASSERT_TRUE(c.Pull("w", w.data(), 3).Wait().ok());
  EXPECT_EQ(w, std::vector<float>(3, -14.0f));
  // Every push's staleness is recorded: 0, 1, 2, then 0.
  const ClientStats stats = c.stats();
  EXPECT_EQ(stats.pushes, 4);
  EXPECT_EQ(stats.max_push_staleness, 2);
  EXPECT_EQ(stats.push_staleness_sum, 3);
}

// The loss a worker sets travels with its pushes to the server's compensator (LC-ASGD here,
// its scale floored at 0.25 so that the figures are exact).
TEST(ClusterTest, PushesCarryTheLossTheWorkerSet) {
  LocalCluster cluster({.servers = 1,
                        .workers = 1,
                        .server_flags = {"--aggregator=sum:compensation=lcasgd,rho_min=0.25",
                                         "--optimizer=sgd:lr=1", "--init=zeros"}});
  auto clients = cluster.ConnectClients(1);
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTensors({{"w", {2}, 0}}).ok());
  std::vector<float> w(2), g(2, 1.0f);
  ASSERT_TRUE(c.Pull("w", w.data(), 2).Wait().ok());  // base version 0
  c.SetLoss(2.0);
  ASSERT_TRUE(c.Push("w", g.data(), 2).Wait().ok());  // one report: plain (w = -1)
  ASSERT_TRUE(c.Pull("w", w.data(), 2).Wait().ok());  // base version 1
  c.SetLoss(1.0);
  ASSERT_TRUE(c.Push("w", g.data(), 2).Wait().ok());  // fresh: plain (w = -2)
  // One version stale; reports (0, 2), (1, 1), (1, 1): slope -1, predicted loss 0: scale 0.25.
  ASSERT_TRUE(c.Push("w", g.data(), 2).Wait().ok());
  c.SetLoss(std::numeric_limits<double>::quiet_NaN());
  ASSERT_TRUE(c.Push("w", g.data(), 2).Wait().ok());  // no loss: plain
  ASSERT_TRUE(c.Pull("w", w.data(), 2).Wait().ok());
  EXPECT_EQ(w, std::vector<float>(2, -3.25f));
}

// The scheduler's layer-wise schedule reaches the workers with the shard map (so a run's first
// step follows it, whatever the host's timing) and on their heartbeat replies; a layer
// it pushes every K steps delivers exactly the sum of its K gradients to the servers; a switch
// by `hetps ctl set layer_schedule=` reaches them live, and a refused spec changes nothing.
TEST(ClusterTest, LayerScheduleAccumulatesExactlyAndSwitchesLive) {
  LocalCluster cluster({.servers = 1,
                        .workers = 1,
                        .scheduler_flags = {"--layer_schedule=fixed:deep=3,deep_from=1"},
                        .server_flags = {"--optimizer=sgd:lr=1", "--init=zeros"}});
  auto clients = cluster.ConnectClients(1, [](ClientOptions& o) { o.heartbeat_interval_ms = 50; });
  Client& c = *clients[0];
  const std::vector<TensorSpec> tensors = {{"shallow", {6}, 0}, {"deep", {6}, 1}};
  ASSERT_TRUE(c.DeclareTensors(tensors).ok());
  auto arrived = [&](const std::string& prefix) {
    const LayerPeriods p = c.layer_schedule();
    return p.spec.starts_with(prefix) && p.periods.size() == 2;
  };
  auto wait_for = [&](const std::string& prefix) {
    for (int i = 0; i < 200 && !arrived(prefix); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return arrived(prefix);
  };
  ASSERT_TRUE(arrived("fixed:")) << "not with the shard map: " << c.layer_schedule().spec;
  EXPECT_EQ(c.layer_schedule().Period(0), 1);
  EXPECT_EQ(c.layer_schedule().Period(1), 3);

  LayerAccumulator acc({{0, 6}, {1, 6}});
  int deep_pushes = 0;
  auto step = [&](int s) {
    acc.BeginStep(c.layer_schedule());
    for (int t = 0; t < 2; ++t) {
      std::vector<float> g(6);
      for (int j = 0; j < 6; ++j) g[j] = Grad(t, s, j);
      acc.Measure(t, g.data(), g.data());
      if (acc.Offer(t, g.data())) {
        deep_pushes += t;
        ASSERT_TRUE(c.Push(tensors[t].name, g.data(), 6).Wait().ok());
      }
    }
    acc.Report(c);
    ASSERT_TRUE(c.Clock().ok());
  };
  auto pulled = [&](int t, int steps) {
    std::vector<float> values(6, 1.0f);
    EXPECT_TRUE(c.Pull(tensors[t].name, values.data(), 6).Wait().ok());
    for (int j = 0; j < 6; ++j) {
      float want = 0;
      for (int s = 0; s < steps; ++s) want -= Grad(t, s, j);
      EXPECT_EQ(values[j], want) << tensors[t].name << "[" << j << "] after " << steps;
    }
  };
  for (int s = 0; s < 7; ++s) step(s);
  EXPECT_EQ(deep_pushes, 2);
  pulled(0, 7);
  pulled(1, 6);  // step 6 waits in the accumulator
  EXPECT_EQ(acc.deferred_bytes(1), 5 * 24);

  EXPECT_NE(cluster.Ctl("set layer_schedule=fixed:deep=0"), 0);
  EXPECT_EQ(cluster.Ctl("set layer_schedule=every"), 0);
  ASSERT_TRUE(wait_for("every")) << c.layer_schedule().spec;
  step(7);
  EXPECT_EQ(deep_pushes, 3);
  pulled(1, 8);
}

TEST(ClusterTest, ClientReportsBadRequestsAsStatus) {
  LocalCluster cluster({.servers = 1, .workers = 2});
  auto clients = cluster.ConnectClients(2);
  std::vector<float> buf(10);
  EXPECT_EQ(clients[0]->Push("x", buf.data(), 10).Wait().code(), StatusCode::kFailedPrecondition);
  // Conflicting declarations: the second is refused; a corrected retry completes the collective.
  Status first, conflicting, retried;
  LocalCluster::RunEach(2, [&](int i) {
    if (i == 0) {
      first = clients[0]->DeclareTensors({{"x", {10}, 0}});
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      conflicting = clients[1]->DeclareTensors({{"x", {20}, 0}});
      retried = clients[1]->DeclareTensors({{"x", {10}, 0}});
    }
  });
  EXPECT_TRUE(first.ok()) << first.ToString();
  EXPECT_EQ(conflicting.code(), StatusCode::kInvalidArgument) << conflicting.ToString();
  EXPECT_TRUE(retried.ok()) << retried.ToString();
  EXPECT_EQ(clients[0]->Push("y", buf.data(), 10).Wait().code(), StatusCode::kNotFound);
  EXPECT_EQ(clients[0]->Push("x", buf.data(), 9).Wait().code(), StatusCode::kSizeMismatch);
  EXPECT_EQ(clients[0]->Pull("x", nullptr, 10).Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(clients[0]->Push("x", buf.data(), 10).Wait().ok());
}

// Sparse tables (docs/tables.md): two workers push rows with repeated keys to a table spread
// over two servers; every key's row is minus the exact sum of its gradients (sgd lr 1 from
// zeros), under an asynchronous and a lockstep controller.
class TableClusterTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Consistency, TableClusterTest, ::testing::Values("asp", "bsp"));

float RowGrad(int worker, int round, uint64_t key, int j) {
  return static_cast<float>((worker + 1) * ((key + round + j) % 5 + 1));
}

TEST_P(TableClusterTest, RowsAreTheExactSumsOfEveryPush) {
  const int kWorkers = 2, kRounds = 3, kDim = 3;
  LocalCluster cluster(
      {.servers = 2,
       .workers = kWorkers,
       .server_flags = {"--optimizer=sgd:lr=1", "--init=zeros", "--consistency=" + GetParam()}});
  auto clients = cluster.ConnectClients(kWorkers);
  const TableOptions table{.dim = kDim, .init = "zeros"};
  LocalCluster::RunEach(kWorkers, [&](int i) {
    ASSERT_TRUE(clients[i]->DeclareTable("emb", table).ok());
    ASSERT_TRUE(clients[i]->DeclareTensors({{"dense", {4}, 0}}).ok());
  });
  const ShardMap& map = clients[0]->shard_map();
  // 200 keys and 50 of them again in the same push: every bucket, both servers.
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 200; ++k) keys.push_back(k * 7919);
  for (uint64_t k = 0; k < 50; ++k) keys.push_back(k * 7919);
  std::set<int> servers;
  for (uint64_t k : keys) {
    servers.insert(map.partitions()[map.TablePartition(map.TensorId("emb"), k)].server_rank);
  }
  EXPECT_EQ(servers.size(), 2u);
  LocalCluster::RunEach(kWorkers, [&](int i) {
    for (int r = 0; r < kRounds; ++r) {
      std::vector<float> grads;
      for (uint64_t k : keys) {
        for (int j = 0; j < kDim; ++j) grads.push_back(RowGrad(i, r, k, j));
      }
      ASSERT_TRUE(
          clients[i]
              ->PushRows("emb", keys.data(), static_cast<int64_t>(keys.size()), grads.data())
              .Wait()
              .ok());
      ASSERT_TRUE(clients[i]->Clock().ok());
    }
    ASSERT_TRUE(clients[i]->Barrier().ok());
  });
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_TRUE(clients[1]
                  ->PullRows("emb", keys.data(), static_cast<int64_t>(keys.size()), rows.data())
                  .Wait()
                  .ok());
  for (size_t n = 0; n < keys.size(); ++n) {
    const uint64_t k = keys[n];
    const int repeats = n < 50 || n >= 200 ? 2 : 1;
    for (int j = 0; j < kDim; ++j) {
      float want = 0;
      for (int i = 0; i < kWorkers; ++i) {
        for (int r = 0; r < kRounds; ++r) want -= repeats * RowGrad(i, r, k, j);
      }
      ASSERT_EQ(rows[n * kDim + j], want) << "key " << k << " dim " << j;
    }
  }
}

// A call whose bucket holds more keys than one request carries (8 MiB of keys and rows) goes
// in several requests to that bucket, each numbered and applied once.
TEST(TableClusterChunksTest, WideRowsOfOneCallGoInSeveralRequestsAndSumExactly) {
  LocalCluster cluster({.servers = 1, .workers = 1, .server_flags = {"--optimizer=sgd:lr=1"}});
  auto clients = cluster.ConnectClients(1);
  Client& c = *clients[0];
  const int64_t dim = 32768;  // 63 keys per request
  ASSERT_TRUE(c.DeclareTable("wide", {.dim = dim, .init = "zeros"}).ok());
  ASSERT_TRUE(c.DeclareTensors({}).ok());
  std::vector<uint64_t> keys(600);
  std::iota(keys.begin(), keys.end(), 1);
  std::vector<float> grads(keys.size() * dim);
  for (size_t k = 0; k < keys.size(); ++k) {
    std::fill_n(grads.begin() + k * dim, dim, static_cast<float>(k % 7 + 1));
  }
  const int64_t requests_before = c.stats().requests;
  ASSERT_TRUE(c.PushRows("wide", keys.data(), 600, grads.data()).Wait().ok());
  EXPECT_GE(c.stats().requests - requests_before, 600 / 63);
  std::vector<float> rows(grads.size());
  ASSERT_TRUE(c.PullRows("wide", keys.data(), 600, rows.data()).Wait().ok());
  for (size_t k = 0; k < keys.size(); ++k) {
    ASSERT_EQ(rows[k * dim], -static_cast<float>(k % 7 + 1)) << k;
    ASSERT_EQ(rows[k * dim + dim - 1], -static_cast<float>(k % 7 + 1)) << k;
  }
}

TEST(TableClusterErrorsTest, MisuseGetsClearErrorsAndServingGoesOn) {
  LocalCluster cluster({.servers = 2, .workers = 2, .server_flags = {"--optimizer=sgd:lr=1"}});
  auto clients = cluster.ConnectClients(2);
  // DeclareTable's own checks: a name twice, a dim of 0.
  ASSERT_TRUE(clients[0]->DeclareTable("t2", {.dim = 2}).ok());
  EXPECT_EQ(clients[0]->DeclareTable("t2", {.dim = 2}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(clients[0]->DeclareTable("bad", {.dim = 0}).code(), StatusCode::kInvalidArgument);
  // The workers declare "emb" with dims 4 and 5 (a table may also be declared as a tensor
  // spec): whichever arrives second is refused naming the table, declares it as the first did,
  // and the collective declaration completes.
  std::atomic<int> refused{-1};
  LocalCluster::RunEach(2, [&](int i) {
    auto model = [](int64_t dim) {
      return std::vector<TensorSpec>{{"emb", {dim}, 0, {.dim = dim, .max_rows = 8}},
                                     {"dense", {4}, 0}};
    };
    Status s = clients[i]->DeclareTensors(model(4 + i));
    if (s.ok()) return;
    refused = i;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("another dim"), std::string::npos) << s.message();
    s = clients[i]->DeclareTensors(model(4 + (1 - i)));
    ASSERT_TRUE(s.ok()) << s.ToString();
  });
  EXPECT_NE(refused.load(), -1) << "one of the two declarations must have been refused";
  Client& c = *clients[0];
  const int64_t dim = c.shard_map().tensors()[c.shard_map().TensorId("emb")].table.dim;
  std::vector<uint64_t> keys(64);
  std::iota(keys.begin(), keys.end(), 0);
  std::vector<float> rows(64 * dim, 1.0f);
  EXPECT_EQ(c.PushRows("nope", keys.data(), 1, rows.data()).Wait().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.Push("emb", rows.data(), 4).Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.PushRows("dense", keys.data(), 1, rows.data()).Wait().code(),
            StatusCode::kInvalidArgument);
  // max_rows 8 on each server without eviction: 64 new keys do not fit, and say why.
  Status full = c.PushRows("emb", keys.data(), 64, rows.data()).Wait();
  EXPECT_EQ(full.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(full.message().find("max_rows"), std::string::npos) << full.message();
  // The servers go on: a key that fits trains, and a pull reads it.
  std::vector<float> row(dim);
  ASSERT_TRUE(c.PushRows("emb", keys.data(), 1, rows.data()).Wait().ok());
  ASSERT_TRUE(c.PullRows("emb", keys.data(), 1, row.data()).Wait().ok());
}

}  // namespace
}  // namespace hetps::testing
