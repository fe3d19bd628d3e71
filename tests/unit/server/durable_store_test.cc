// The durable write path of a server (server/durable_store.h) driven through the serving code
// itself (ServeData, CompleteRound, CheckpointOwned): restarts restore values, optimizer state,
// versions, held updates and aggregator state; numbered updates apply once; a process killed at
// each crash point of the write path loses nothing it acknowledged; damaged data dirs are
// refused.
#include "server/durable_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/compress/codec.h"
#include "server/fault_point.h"
#include "server/serving.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;

ShardMap TestMap(int64_t b_length = 40) {
  // "a": two partitions of 100 floats, "b": one of b_length (40; a value of 64 KiB or more goes
  // to the value log), all on server rank 0.
  return *ShardMap::Build({{"a", {200}, 0}, {"b", {b_length}, 1}}, 1,
                          std::max<int64_t>(100, b_length) * 4);
}

// One server's serving state over a data dir, driven like the server drives it.
class Node {
 public:
  Node(const ShardMap& map, std::string dir, Durability durability,
       std::string optimizer = "sgd:lr=1", std::string aggregator = "sum")
      : map_(map),
        dir_(std::move(dir)),
        durability_(durability),
        optimizer_(std::move(optimizer)),
        aggregator_(std::move(aggregator)) {}

  // Opens the data dir and restores what it holds (or claims it); the error of either.
  Status Open() {
    auto store = DurableStore::Open(dir_, durability_, ring_segment_bytes);
    if (!store.ok()) return store.status();
    durable_ = std::move(*store);
    state_.optimizer = std::move(*MakeOptimizer(optimizer_));
    spec_ = *Aggregators().Parse(aggregator_);
    auto init = *Initializer::Make({"zeros", 0, 1});
    state_.store = std::make_unique<PartitionStore>(map_, 0, *state_.optimizer, init, &*spec_);
    state_.map = &map_;
    state_.codecs = &codecs_;
    state_.owned = {{}};
    for (const Partition& p : map_.partitions()) state_.owned[0].push_back(p.id);
    durable_->Prepare(map_.partitions().size());
    state_.durable = durable_.get();
    if (!durable_->meta()) {
      proto::DurableMeta meta;
      meta.set_server_rank(0);
      *meta.mutable_shard_map() = ToProto(map_);
      return durable_->SetMeta(meta);
    }
    for (int32_t id : state_.owned[0]) {
      auto n = RecoverPartition(state_, *state_.store->Find(id));
      if (!n.ok()) return n.status();
      replayed_ += *n;
    }
    return Status();
  }

  // A PUSH of `g` to partition `pid`, numbered (incarnation, seq); its reply header.
  proto::Header Push(int32_t pid, const std::vector<float>& g, uint64_t incarnation = 0,
                     int64_t seq = 0, bool hold = false, int64_t clock = 0, int32_t worker = 1) {
    DataRequest r = PushRequest(pid, g, incarnation, seq, hold, clock, worker);
    return ServeData(state_, r, scratch_).header;
  }
  // A PUSH from worker 1 computed at version `base`, reporting `loss` (Client::SetLoss).
  proto::Header PushWithLoss(int32_t pid, const std::vector<float>& g, int64_t base, double loss) {
    DataRequest r = PushRequest(pid, g, 0, 0, false, 0, 1);
    r.message.header.set_version(base);
    r.message.header.set_loss(loss);
    return ServeData(state_, r, scratch_).header;
  }
  // A PUSH of `g` whose reply `answered` sees the moment the server sends it.
  void PushSeeingTheReply(int32_t pid, const std::vector<float>& g,
                          const std::function<void(const DataReply&)>& answered) {
    DataRequest r = PushRequest(pid, g, 0, 0, false, 0, 1);
    ServeData(state_, r, scratch_, [&](DataReply reply) { answered(reply); });
  }
  DataRequest PushRequest(int32_t pid, const std::vector<float>& g, uint64_t incarnation,
                          int64_t seq, bool hold, int64_t clock, int32_t worker) {
    DataRequest r;
    proto::Header& h = r.message.header;
    h.set_type(proto::PUSH);
    h.set_sender(worker);
    h.set_partition(pid);
    h.set_clock(clock);
    h.set_dtype(proto::FLOAT32);
    h.set_num_elements(static_cast<int64_t>(g.size()));
    h.set_weight(1);
    h.set_version(state_.store->Find(pid)->version());
    h.set_incarnation(incarnation);
    h.set_seq(seq);
    r.message.payload.emplace_back(g.data(), g.size() * sizeof(float));
    r.hold = hold;
    return r;
  }

  void Round(const RoundSpec& round) { CompleteRound(state_, 0, round); }
  void Checkpoint() { CheckpointOwned(state_, 0); }
  std::vector<float> Values(int32_t pid) {
    const PartitionState& p = *state_.store->Find(pid);
    return {p.values(), p.values() + p.info().length};
  }
  int64_t Version(int32_t pid) { return state_.store->Find(pid)->version(); }
  int64_t held_by(int32_t pid, int32_t worker) { return state_.store->Find(pid)->HeldBy(worker); }
  int64_t replayed() const { return replayed_; }
  int64_t log_bytes(int32_t pid) const { return durable_->log_bytes(pid); }

  int64_t ring_segment_bytes = int64_t{64} << 20;  // the value log's segments (set before Open)

 private:
  ShardMap map_;
  std::string dir_;
  Durability durability_;
  std::string optimizer_, aggregator_;
  std::optional<AlgorithmSpec> spec_;
  compress::CodecCache codecs_;
  std::unique_ptr<DurableStore> durable_;
  ServingState state_;
  std::vector<float> scratch_;
  int64_t replayed_ = 0;
};

std::vector<float> Filled(int64_t n, float v) { return std::vector<float>(n, v); }

class DurableStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    dir_ = fs::temp_directory_path() / ("hetps-durable-" + std::to_string(getpid()) + "-" + name);
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Dir() const { return dir_.string(); }

  fs::path dir_;
  ShardMap map_ = TestMap();
};

TEST_F(DurableStoreTest, RestartRestoresValuesOptimizerStateAndVersions) {
  // Adam keeps two moment arrays and a step count: a restart that lost them would take a
  // different next step than a server that never stopped.
  Node reference(map_, Dir() + "-ref", Durability::kNone, "adam:lr=0.1");
  ASSERT_TRUE(reference.Open().ok());
  {
    Node node(map_, Dir(), Durability::kProcess, "adam:lr=0.1");
    ASSERT_TRUE(node.Open().ok());
    for (int i = 1; i <= 6; ++i) {
      for (int32_t pid = 0; pid < 3; ++pid) {
        const int64_t n = map_.partitions()[pid].length;
        node.Push(pid, Filled(n, 0.5f * i));
        reference.Push(pid, Filled(n, 0.5f * i));
      }
      if (i == 3) node.Checkpoint();  // half in the checkpoint, half in the log
    }
  }  // gone without a final checkpoint
  Node node(map_, Dir(), Durability::kProcess, "adam:lr=0.1");
  ASSERT_TRUE(node.Open().ok());
  EXPECT_EQ(node.replayed(), 3 * 3);  // the three pushes per partition after the checkpoint
  for (int32_t pid = 0; pid < 3; ++pid) {
    EXPECT_EQ(node.Version(pid), 6);
    EXPECT_EQ(node.Values(pid), reference.Values(pid)) << "partition " << pid;
    const int64_t n = map_.partitions()[pid].length;
    node.Push(pid, Filled(n, -2.0f));
    reference.Push(pid, Filled(n, -2.0f));
    EXPECT_EQ(node.Values(pid), reference.Values(pid)) << "the step after, partition " << pid;
  }
  fs::remove_all(Dir() + "-ref");
}

// The loss a push reported is logged with it: a server restarted from a checkpoint and the log
// after it has the same loss reports as one that never stopped, so LC-ASGD compensates alike.
TEST_F(DurableStoreTest, ReportedLossesAreRestoredForLossPredictingCompensation) {
  const std::string lcasgd = "sum:compensation=lcasgd,rho_min=0.05";
  Node reference(map_, Dir() + "-ref", Durability::kNone, "sgd:lr=1", lcasgd);
  Node plain(map_, Dir() + "-plain", Durability::kNone, "sgd:lr=1", "sum");
  ASSERT_TRUE(reference.Open().ok() && plain.Open().ok());
  auto push = [](Node& n, int i) {  // worker 1's loss falls 0.1 per version; one version stale
    n.PushWithLoss(2, Filled(40, 1.0f), std::max<int64_t>(0, n.Version(2) - 1), 2.0 - 0.1 * i);
  };
  {
    Node node(map_, Dir(), Durability::kProcess, "sgd:lr=1", lcasgd);
    ASSERT_TRUE(node.Open().ok());
    for (int i = 0; i < 6; ++i) {
      for (Node* n : {&node, &reference, &plain}) push(*n, i);
      if (i == 2) node.Checkpoint();  // three reports in the checkpoint, three in the log
    }
  }
  Node node(map_, Dir(), Durability::kProcess, "sgd:lr=1", lcasgd);
  ASSERT_TRUE(node.Open().ok());
  EXPECT_EQ(node.replayed(), 3);
  EXPECT_EQ(node.Values(2), reference.Values(2));
  EXPECT_NE(node.Values(2), plain.Values(2));  // the compensation did act
  for (Node* n : {&node, &reference}) push(*n, 6);
  EXPECT_EQ(node.Values(2), reference.Values(2)) << "the step after";
  fs::remove_all(Dir() + "-ref");
  fs::remove_all(Dir() + "-plain");
}

// Updates held for rounds are bounded per worker and partition: one more is refused, not kept,
// while other workers are still served; once a round takes them, the worker may push again.
TEST_F(DurableStoreTest, UpdatesHeldForRoundsAreBoundedPerWorker) {
  Node node(map_, Dir(), Durability::kProcess);
  ASSERT_TRUE(node.Open().ok());
  const int64_t most = PartitionState::kMaxHeldPerWorker;
  for (int64_t c = 0; c < most; ++c) {  // a client claiming ever later clocks
    ASSERT_EQ(node.Push(2, Filled(40, 1), 0, 0, /*hold=*/true, c, /*worker=*/1).type(),
              proto::PUSH_REPLY)
        << c;
  }
  const proto::Header refused = node.Push(2, Filled(40, 1), 0, 0, true, most, 1);
  EXPECT_EQ(refused.type(), proto::ERROR);
  EXPECT_EQ(refused.error(), StatusCode::kUnavailable);
  EXPECT_NE(refused.error_message().find("the most one worker may"), std::string::npos);
  EXPECT_EQ(node.Push(2, Filled(40, 1), 0, 0, true, 0, /*worker=*/2).type(), proto::PUSH_REPLY);
  EXPECT_EQ(node.held_by(2, 1), most);
  RoundSpec round;  // closes clock 0 for workers 1 and 2
  round.clock = 0;
  round.workers = {1, 2};
  node.Round(round);
  EXPECT_EQ(node.held_by(2, 1), most - 1);
  EXPECT_EQ(node.Push(2, Filled(40, 1), 0, 0, true, most, 1).type(), proto::PUSH_REPLY);
}

TEST_F(DurableStoreTest, NumberedUpdatesApplyOnceAcrossRestarts) {
  const uint64_t incarnation = 0x1234;
  {
    Node node(map_, Dir(), Durability::kProcess);
    ASSERT_TRUE(node.Open().ok());
    EXPECT_FALSE(node.Push(2, Filled(40, 1), incarnation, 1).duplicate());
    EXPECT_FALSE(node.Push(2, Filled(40, 1), incarnation, 2).duplicate());
    const proto::Header again = node.Push(2, Filled(40, 1), incarnation, 2);
    EXPECT_TRUE(again.duplicate());
    EXPECT_EQ(again.version(), 2);
    EXPECT_EQ(node.Values(2), Filled(40, -2));
    EXPECT_FALSE(node.Push(2, Filled(40, 1), incarnation + 1, 1).duplicate());  // another client
    node.Checkpoint();
    EXPECT_FALSE(node.Push(2, Filled(40, 1), incarnation, 3).duplicate());  // logged only
  }
  Node node(map_, Dir(), Durability::kProcess);
  ASSERT_TRUE(node.Open().ok());
  for (int64_t seq = 1; seq <= 3; ++seq) {  // a client resending all it sent
    EXPECT_TRUE(node.Push(2, Filled(40, 1), incarnation, seq).duplicate()) << seq;
  }
  EXPECT_FALSE(node.Push(2, Filled(40, 1), incarnation, 4).duplicate());
  EXPECT_EQ(node.Values(2), Filled(40, -5));
  // Unnumbered updates (seq 0) are never taken for duplicates.
  EXPECT_FALSE(node.Push(2, Filled(40, 1)).duplicate());
  EXPECT_FALSE(node.Push(2, Filled(40, 1)).duplicate());
  EXPECT_EQ(node.Values(2), Filled(40, -7));
}

// A push is acknowledged as early as its durability allows: once it is in the log, before the
// optimizer runs (the apply then overlaps the reply's way to the worker). The same thread
// applies it before serving anything else, so no read sees the partition in between.
TEST_F(DurableStoreTest, APushIsAnsweredOnceLoggedAndAppliedAfterTheAnswer) {
  Node node(map_, Dir(), Durability::kProcess);
  ASSERT_TRUE(node.Open().ok());
  node.Push(2, Filled(40, 1));
  const int64_t logged_before = node.log_bytes(2);
  bool answered = false;
  node.PushSeeingTheReply(2, Filled(40, 1), [&](const DataReply& reply) {
    answered = true;
    EXPECT_EQ(reply.header.type(), proto::PUSH_REPLY);
    EXPECT_GT(node.log_bytes(2), logged_before) << "answered before it was logged";
    EXPECT_EQ(node.Version(2), 1) << "answered only after the optimizer ran";
    EXPECT_EQ(node.Values(2), Filled(40, -1));
  });
  EXPECT_TRUE(answered);
  EXPECT_EQ(node.Version(2), 2);
  EXPECT_EQ(node.Values(2), Filled(40, -2));
}

TEST_F(DurableStoreTest, HeldUpdatesAndRoundsSurviveARestart) {
  RoundSpec clock0;
  clock0.clock = 0;
  {
    Node node(map_, Dir(), Durability::kProcess);
    ASSERT_TRUE(node.Open().ok());
    node.Push(2, Filled(40, 1), 0, 0, /*hold=*/true, /*clock=*/0, /*worker=*/1);
    node.Checkpoint();  // one held update inside the checkpoint
    node.Push(2, Filled(40, 2), 0, 0, /*hold=*/true, /*clock=*/0, /*worker=*/2);  // in the log
    EXPECT_EQ(node.Values(2), Filled(40, 0));
  }
  {
    Node node(map_, Dir(), Durability::kProcess);
    ASSERT_TRUE(node.Open().ok());
    EXPECT_EQ(node.Values(2), Filled(40, 0));  // still held
    node.Round(clock0);                        // both workers' updates, one step
    EXPECT_EQ(node.Values(2), Filled(40, -3));
    EXPECT_EQ(node.Version(2), 1);
  }
  Node node(map_, Dir(), Durability::kProcess);  // the round itself was logged
  ASSERT_TRUE(node.Open().ok());
  EXPECT_EQ(node.Values(2), Filled(40, -3));
  EXPECT_EQ(node.Version(2), 1);
}

TEST_F(DurableStoreTest, AggregatorStateSurvivesACheckpoint) {
  // fedbuff:k=3 buffers two deltas; the third, after a restart, must step on all three.
  const std::string fedbuff = "fedbuff:k=3,exponent=0";
  Node reference(map_, Dir() + "-ref", Durability::kNone, "sgd:lr=1", fedbuff);
  ASSERT_TRUE(reference.Open().ok());
  {
    Node node(map_, Dir(), Durability::kProcess, "sgd:lr=1", fedbuff);
    ASSERT_TRUE(node.Open().ok());
    for (float v : {3.0f, 6.0f}) {
      node.Push(2, Filled(40, v));
      reference.Push(2, Filled(40, v));
    }
    node.Checkpoint();
  }
  Node node(map_, Dir(), Durability::kProcess, "sgd:lr=1", fedbuff);
  ASSERT_TRUE(node.Open().ok());
  EXPECT_EQ(node.replayed(), 0);
  EXPECT_EQ(node.Values(2), Filled(40, 0));  // nothing applied yet: two of three buffered
  node.Push(2, Filled(40, 9));
  reference.Push(2, Filled(40, 9));
  EXPECT_EQ(node.Values(2), Filled(40, -6));  // -(3 + 6 + 9) / 3
  EXPECT_EQ(node.Values(2), reference.Values(2));
  fs::remove_all(Dir() + "-ref");
}

TEST_F(DurableStoreTest, DurabilityNoneKeepsOnlyCheckpoints) {
  {
    Node node(map_, Dir(), Durability::kNone);
    ASSERT_TRUE(node.Open().ok());
    node.Push(2, Filled(40, 1));
    node.Checkpoint();
    node.Push(2, Filled(40, 1));  // not logged: lost with the process, as documented
  }
  Node node(map_, Dir(), Durability::kNone);
  ASSERT_TRUE(node.Open().ok());
  EXPECT_EQ(node.Values(2), Filled(40, -1));
}

// Checkpoints the value log has no room for (here: there is none, under durability none) go
// to files of their own: the optimizer's moments come back exactly (the next step equals one
// without the restart), a replaced file and one a crash left before its record are removed,
// and a damaged file refuses the start naming it.
TEST_F(DurableStoreTest, CheckpointFilesRestoreTheWholeStateAndAreCheckedAndCleanedUp) {
  constexpr int64_t kLength = 20000;
  map_ = TestMap(kLength);
  const int32_t b = static_cast<int32_t>(map_.partitions().size()) - 1;
  const fs::path files = dir_ / "checkpoints";
  auto listed = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(files)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  };
  std::vector<float> grad(kLength);
  for (int64_t i = 0; i < kLength; ++i) grad[i] = 0.001f * static_cast<float>(i % 97) - 0.04f;
  Node reference(map_, (dir_.string() + "-reference"), Durability::kNone, "adam:lr=0.1");
  fs::remove_all(dir_.string() + "-reference");
  ASSERT_TRUE(reference.Open().ok());
  {
    Node node(map_, Dir(), Durability::kNone, "adam:lr=0.1");
    ASSERT_TRUE(node.Open().ok());
    for (int i = 0; i < 3; ++i) {
      node.Push(b, grad);
      reference.Push(b, grad);
    }
    node.Checkpoint();
    ASSERT_EQ(listed().size(), 1u);
    const std::string first = listed()[0];
    EXPECT_EQ(first.rfind(std::to_string(b) + "-", 0), 0u) << first;
    node.Push(b, grad);
    reference.Push(b, grad);
    node.Checkpoint();
    ASSERT_EQ(listed().size(), 1u) << "the replaced file is removed";
    EXPECT_NE(listed()[0], first);
  }
  std::ofstream(files / (std::to_string(b) + "-999999")) << "left by a crash";
  {
    Node node(map_, Dir(), Durability::kNone, "adam:lr=0.1");
    ASSERT_TRUE(node.Open().ok());
    EXPECT_EQ(listed().size(), 1u) << "the file without a record is removed";
    EXPECT_EQ(node.Values(b), reference.Values(b));
    EXPECT_EQ(node.Version(b), 4);
    node.Push(b, grad);
    reference.Push(b, grad);
    EXPECT_EQ(node.Values(b), reference.Values(b)) << "Adam's moments came back too";
  }
  const fs::path file = files / listed()[0];
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 100));
    f.put(0x7f);
  }
  Node damaged(map_, Dir(), Durability::kNone, "adam:lr=0.1");
  Status opened = damaged.Open();
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.message().find(file.string()), std::string::npos) << opened.message();
  EXPECT_NE(opened.message().find("hash"), std::string::npos) << opened.message();
  fs::resize_file(file, 1000);
  Node truncated(map_, Dir(), Durability::kNone, "adam:lr=0.1");
  opened = truncated.Open();
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.message().find("damaged"), std::string::npos) << opened.message();
  fs::remove_all(dir_.string() + "-reference");
}

// Update values the value log's ring has no room for go to the partition's spill file: they
// come back after a restart, a spilled value that fails its hash ends the partition's log
// before it (process durability), and after a checkpoint the file is written over from its
// start instead of growing.
TEST_F(DurableStoreTest, ValuesTheRingHasNoRoomForAreSpilledAndComeBack) {
  constexpr int64_t kLength = 200000;  // 800 KB: one value per 1 MiB segment, four in the ring
  map_ = TestMap(kLength);
  const int32_t b = static_cast<int32_t>(map_.partitions().size()) - 1;
  const fs::path spill = dir_ / "spill" / std::to_string(b);
  auto node = [&] {
    auto n = std::make_unique<Node>(map_, Dir(), Durability::kProcess);
    n->ring_segment_bytes = 1 << 20;
    return n;
  };
  {
    auto n = node();
    ASSERT_TRUE(n->Open().ok());
    for (int i = 1; i <= 10; ++i) n->Push(b, Filled(kLength, static_cast<float>(i)));
  }
  ASSERT_TRUE(fs::exists(spill));
  EXPECT_GE(fs::file_size(spill), static_cast<uintmax_t>(6 * kLength * 4));
  {
    auto n = node();
    ASSERT_TRUE(n->Open().ok());
    EXPECT_EQ(n->Values(b), Filled(kLength, -55.0f));
    EXPECT_EQ(n->Version(b), 10);
    EXPECT_EQ(n->replayed(), 10);
    n->Push(b, Filled(kLength, 11));  // spilled after the others
  }
  const uintmax_t size = fs::file_size(spill);
  {
    std::fstream f(spill, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 100));
    f.put(0x7f);
  }
  {
    auto n = node();
    ASSERT_TRUE(n->Open().ok());
    EXPECT_EQ(n->Values(b), Filled(kLength, -55.0f)) << "push 11 failed its hash: dropped";
    EXPECT_EQ(n->Version(b), 10);
    n->Checkpoint();
    for (int i = 0; i < 6; ++i) n->Push(b, Filled(kLength, 1));
  }
  EXPECT_EQ(fs::file_size(spill), size) << "written over from its start";
  auto n = node();
  ASSERT_TRUE(n->Open().ok());
  EXPECT_EQ(n->Values(b), Filled(kLength, -61.0f));
}

// A child process pushes 1, 2, ... 12 (seq = value) to partition "b" and tells the parent each
// acknowledgement; checkpoints after every fourth push. The crash hook kills it at the n-th
// time `point` is reached. Then the parent recovers, resends everything not acknowledged with
// the same numbers, and the partition must hold exactly -(1 + 2 + ... + 12): every update
// applied once, none lost, none twice.
// Each case runs with small values (in RocksDB's log) and with large ones (in the value log).
struct CrashCase {
  const char* point;
  int nth;
  int64_t length = 40;
};

class CrashPointTest : public DurableStoreTest, public ::testing::WithParamInterface<CrashCase> {};

TEST_P(CrashPointTest, NothingAcknowledgedIsLostAndNothingAppliesTwice) {
  constexpr int kPushes = 12;
  const int64_t length = GetParam().length;
  map_ = TestMap(length);
  const int32_t b = static_cast<int32_t>(map_.partitions().size()) - 1;  // "b", the last
  constexpr uint64_t kIncarnation = 77;
  int acks[2];
  ASSERT_EQ(pipe(acks), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(acks[0]);
    const std::string point = std::string(GetParam().point) + ":" + std::to_string(GetParam().nth);
    if (!CrashAt(point)) _exit(10);
    Node node(map_, Dir(), Durability::kProcess);
    if (Status s = node.Open(); !s.ok()) {
      std::fprintf(stderr, "child: %s\n", s.ToString().c_str());
      _exit(11);
    }
    for (int i = 1; i <= kPushes; ++i) {
      const proto::Header reply =
          node.Push(b, Filled(length, static_cast<float>(i)), kIncarnation, i);
      if (reply.type() != proto::PUSH_REPLY) _exit(12);
      if (write(acks[1], &i, sizeof(i)) != sizeof(i)) _exit(13);
      FaultPoint("update.replied");
      if (i % 4 == 0) node.Checkpoint();
    }
    _exit(0);  // the crash point was never reached
  }
  close(acks[1]);
  std::vector<int> acked;
  for (int i; read(acks[0], &i, sizeof(i)) == sizeof(i);) acked.push_back(i);
  close(acks[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child was to die at " << GetParam().point << " #" << GetParam().nth << "; status "
      << status;

  Node node(map_, Dir(), Durability::kProcess);
  ASSERT_TRUE(node.Open().ok());
  float acked_sum = 0;
  for (int i : acked) acked_sum += static_cast<float>(i);
  const float recovered = -node.Values(b)[0];
  const float next = static_cast<float>(acked.size() + 1);
  // Everything acknowledged is there; at most the one update logged but not yet answered more.
  EXPECT_TRUE(recovered == acked_sum || recovered == acked_sum + next)
      << "recovered " << recovered << ", acknowledged " << acked_sum;
  for (int i = static_cast<int>(acked.size()) + 1; i <= kPushes; ++i) {
    node.Push(b, Filled(length, static_cast<float>(i)), kIncarnation, i);  // the client resends
  }
  EXPECT_EQ(node.Values(b), Filled(length, -(kPushes * (kPushes + 1) / 2)));
  EXPECT_EQ(node.Version(b), kPushes);
}

INSTANTIATE_TEST_SUITE_P(
    WritePath, CrashPointTest,
    ::testing::Values(CrashCase{"update.logged", 1}, CrashCase{"update.logged", 6},
                      CrashCase{"update.answered", 3}, CrashCase{"update.answered", 7, 20000},
                      CrashCase{"update.replied", 5}, CrashCase{"update.replied", 8},
                      CrashCase{"checkpoint.saved", 1}, CrashCase{"checkpoint.saved", 2},
                      CrashCase{"checkpoint.written", 1}, CrashCase{"checkpoint.written", 2},
                      CrashCase{"update.value_logged", 1, 20000},
                      CrashCase{"update.value_logged", 7, 20000},
                      CrashCase{"update.logged", 6, 20000}, CrashCase{"update.replied", 8, 20000},
                      CrashCase{"checkpoint.saved", 2, 20000},
                      CrashCase{"checkpoint.written", 2, 20000}),
    [](const ::testing::TestParamInfo<CrashCase>& info) {
      std::string name = info.param.point;
      for (char& c : name) {
        if (c == '.') c = '_';
      }
      return name + "_" + std::to_string(info.param.nth) +
             (info.param.length >= 16384 ? "_value_log" : "");
    });

// Damages the payload of the `nth` (0-based) value-log entry of partition `pid` under log
// sequence number `lsn` (a checkpoint is stored under its lsn + 1, as is the next update).
void DamageValue(const fs::path& dir, int32_t pid, uint64_t lsn, int nth) {
  const std::string path = (dir / "values" / "segment-0").string();
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  for (size_t at = 0; at + 64 <= bytes.size(); at += 64) {
    uint32_t magic;
    int32_t p;
    uint64_t l;
    std::memcpy(&magic, &bytes[at], 4);
    std::memcpy(&p, &bytes[at + 4], 4);
    std::memcpy(&l, &bytes[at + 8], 8);
    if (magic != 0x6c764548 || p != pid || l != lsn || nth-- > 0) continue;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 64 + 8));
    f.put(0x7f);
    return;
  }
  ADD_FAILURE() << "no such value-log entry";
}

// Large values live in the value log. One that did not reach the disk (a machine crash under
// process durability; here damaged on purpose) ends its partition's log before it: the updates
// before it are restored, the rest dropped, and the partition goes on from there. Under machine
// durability that cannot happen to an acknowledged value, so it is damage: the start is refused.
// A lost checkpoint is refused at every level.
TEST_F(DurableStoreTest, ALostValueEndsThePartitionsLogUnlessEveryValueWasSynced) {
  constexpr int64_t kLength = 20000;  // 80000 bytes: into the value log
  // The push that fills the log to this many copies of the partition checkpoints it.
  const int copies = static_cast<int>(LogBytesBeforeCheckpoint(kLength * 4) / (kLength * 4));
  ASSERT_GE(copies, 4);
  const float before = static_cast<float>(copies * (copies + 1) / 2);  // 1 + ... + copies
  const uint64_t lsn = copies + 1;
  map_ = TestMap(kLength);
  const int32_t b = static_cast<int32_t>(map_.partitions().size()) - 1;
  for (Durability level : {Durability::kProcess, Durability::kMachine}) {
    fs::remove_all(dir_);
    {
      Node node(map_, Dir(), level);
      ASSERT_TRUE(node.Open().ok());
      // Entries: pushes 1..copies, the checkpoint (under lsn copies + 1), and two pushes more
      // (lsn copies + 1 and copies + 2).
      for (int i = 1; i <= copies + 2; ++i) node.Push(b, Filled(kLength, static_cast<float>(i)));
    }
    DamageValue(dir_, b, lsn, /*nth=*/1);  // the first push after the checkpoint
    {
      Node node(map_, Dir(), level);
      Status opened = node.Open();
      if (level == Durability::kMachine) {
        ASSERT_FALSE(opened.ok());
        EXPECT_NE(opened.message().find("hash"), std::string::npos) << opened.message();
        continue;
      }
      ASSERT_TRUE(opened.ok()) << opened.ToString();
      EXPECT_EQ(node.Values(b), Filled(kLength, -before)) << "1 + ... + copies, not what followed";
      EXPECT_EQ(node.Version(b), copies);
      node.Push(b, Filled(kLength, 10));
    }
    {
      Node again(map_, Dir(), level);
      ASSERT_TRUE(again.Open().ok());
      EXPECT_EQ(again.Values(b), Filled(kLength, -before - 10))
          << "the dropped records stay dropped";
    }
    DamageValue(dir_, b, lsn, /*nth=*/0);  // the checkpoint
    Node lost(map_, Dir(), level);
    Status opened = lost.Open();
    ASSERT_FALSE(opened.ok());
    EXPECT_NE(opened.message().find(Dir()), std::string::npos) << opened.message();
  }
}

TEST_F(DurableStoreTest, RefusesAFolderThatIsNotADataDir) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "notes.txt") << "not a model";
  auto store = DurableStore::Open(Dir(), Durability::kProcess);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(Dir()), std::string::npos) << store.status().ToString();
  EXPECT_NE(store.status().message().find("empty model"), std::string::npos);
}

TEST_F(DurableStoreTest, RefusesADamagedDataDir) {
  {
    Node node(map_, Dir(), Durability::kProcess);
    ASSERT_TRUE(node.Open().ok());
    node.Push(2, Filled(40, 1));
    node.Checkpoint();
  }
  int damaged = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("MANIFEST-", 0) != 0) continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f << std::string(64, '\x5a');  // the manifest's first records, overwritten
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  auto store = DurableStore::Open(Dir(), Durability::kProcess);
  ASSERT_FALSE(store.ok()) << "a damaged data dir was opened";
  EXPECT_NE(store.status().message().find(Dir()), std::string::npos) << store.status().ToString();
}

TEST_F(DurableStoreTest, RefusesADataDirThatLostItsIndex) {
  {
    Node node(map_, Dir(), Durability::kProcess);
    ASSERT_TRUE(node.Open().ok());
    node.Push(2, Filled(40, 1));
  }
  for (const auto& entry : fs::directory_iterator(dir_)) {  // the files RocksDB opens first
    if (entry.path().filename() == "CURRENT") fs::remove(entry.path());
  }
  auto store = DurableStore::Open(Dir(), Durability::kProcess);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(Dir()), std::string::npos) << store.status().ToString();
}

TEST_F(DurableStoreTest, ParsesDurabilityLevels) {
  EXPECT_EQ(*ParseDurability("none"), Durability::kNone);
  EXPECT_EQ(*ParseDurability("process"), Durability::kProcess);
  EXPECT_EQ(*ParseDurability("machine"), Durability::kMachine);
  auto bad = ParseDurability("disk");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("none, process, machine"), std::string::npos);
}

}  // namespace
}  // namespace hetps
