// The scheduler's side of whole-run checkpoints (scheduler/checkpoints.h), driven without
// processes: which clock it asks for, what a refusal, a dead server, an operator's request and
// the end of the run do to an attempt, and that a cut is complete only once every server
// answered.
#include "scheduler/checkpoints.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "common/cluster_view.h"
#include "common/cut.h"
#include "tests/scratch_dir.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;

class CheckpointsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Checkpoints> Make(int64_t every = 0, std::string dir = "") {
    return std::make_unique<Checkpoints>(
        CheckpointOptions{.dir = dir.empty() ? dir_.string() : dir, .every_clocks = every},
        Checkpoints::Actions{
            .send = [this](int32_t s, const proto::Header& h) { sent_[s].push_back(h); },
            .reply = [this](const Arrival&, const proto::Header& h) { replies_.push_back(h); },
            .live_servers = [this] { return servers_; },
            .describe =
                [] {
                  proto::CutManifest m;
                  m.set_num_servers(2);
                  return m;
                },
            .completed = [this](const proto::Cut& cut) { completed_.push_back(cut.clock()); }});
  }
  // The last CHECKPOINT server `s` was sent.
  const proto::Header& Last(int32_t s) { return sent_[s].back(); }
  proto::Header Done(const proto::Header& request, int64_t bytes) {
    proto::Header r;
    r.set_type(proto::CHECKPOINT_DONE);
    r.set_request_id(request.request_id());
    *r.mutable_cut() = request.cut();
    r.mutable_cut()->set_bytes(bytes);
    r.mutable_cut()->set_seconds(0.5);
    return r;
  }
  proto::Header Refusal(const proto::Header& request, int64_t seen) {
    proto::Header r;
    r.set_type(proto::ERROR);
    r.set_error(proto::ABORTED);
    r.set_request_id(request.request_id());
    *r.mutable_cut() = request.cut();
    r.mutable_cut()->set_seen_clock(seen);
    return r;
  }

  testing::ScratchDir scratch_{"hetps-checkpoints-test"};
  const fs::path dir_ = scratch_.path();
  std::vector<int32_t> servers_ = {1, 2};
  std::map<int32_t, std::vector<proto::Header>> sent_;
  std::vector<int64_t> completed_;  // clocks of complete cuts, for the status
  std::vector<proto::Header> replies_;
};

TEST_F(CheckpointsTest, ARequestIsCutAtTheFurthestKnownClockAndCompleteOnceEveryServerWrote) {
  auto c = Make();
  c->Request({-1, 7, "operator"}, 0);
  c->Tick(/*clock=*/12, /*ready=*/true, 0);
  ASSERT_EQ(sent_[1].size(), 1u);
  EXPECT_EQ(Last(1).cut().clock(), 12);
  EXPECT_EQ(Last(2).cut().dir(), CutDir(dir_.string(), 12));
  c->OnAnswer(1, Done(Last(1), 100), 1);
  EXPECT_TRUE(replies_.empty()) << "one server still writing";
  EXPECT_FALSE(ReadManifest(CutDir(dir_.string(), 12)).ok());
  c->OnAnswer(2, Done(Last(2), 50), 2);
  ASSERT_EQ(replies_.size(), 1u);
  EXPECT_EQ(replies_[0].type(), proto::CHECKPOINT);
  EXPECT_EQ(replies_[0].request_id(), 7u);
  EXPECT_EQ(replies_[0].cut().clock(), 12);
  EXPECT_EQ(replies_[0].cut().bytes(), 150);
  auto manifest = ReadManifest(CutDir(dir_.string(), 12));
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->clock(), 12);
  EXPECT_EQ(manifest->num_servers(), 2);
  EXPECT_EQ(completed_, std::vector<int64_t>{12});
  c->Tick(13, true, 3);
  EXPECT_EQ(sent_[1].size(), 1u) << "nothing more was asked for";
}

TEST_F(CheckpointsTest, ARefusalCallsTheAttemptOffEverywhereAndRetriesPastWhatWasServed) {
  auto c = Make();
  c->Request({-1, 1, "operator"}, 0);
  c->Tick(5, true, 0);
  const proto::Header first = Last(1);
  c->OnAnswer(1, Refusal(first, 9), 0.1);
  ASSERT_EQ(sent_[2].size(), 2u);
  EXPECT_TRUE(Last(2).cut().abort()) << "the server that had not answered forgets it too";
  EXPECT_EQ(Last(2).request_id(), first.request_id());
  c->OnAnswer(2, Done(first, 1), 0.2);  // a late answer to the called-off attempt: ignored
  c->Tick(5, true, 0.3);
  EXPECT_EQ(Last(1).cut().clock(), 10) << "one past the furthest clock served";
  EXPECT_NE(Last(1).request_id(), first.request_id());
  c->OnAnswer(1, Refusal(Last(1), 14), 0.4);
  c->Tick(5, true, 0.5);
  EXPECT_EQ(Last(1).cut().clock(), 16) << "then further ahead";
  EXPECT_TRUE(replies_.empty());
}

TEST_F(CheckpointsTest, AServerDyingCallsTheAttemptOff) {
  auto c = Make();
  c->Request({-1, 1, "operator"}, 0);
  c->Tick(5, true, 0);
  servers_ = {1};
  c->OnServerDead(2, 1);
  EXPECT_TRUE(Last(1).cut().abort());
  c->Tick(5, true, 2);
  EXPECT_FALSE(Last(1).cut().abort());
  EXPECT_EQ(sent_[2].size(), 1u) << "the dead server is told nothing, and not asked again";
  c->OnAnswer(1, Done(Last(1), 1), 3);
  ASSERT_EQ(replies_.size(), 1u);
  EXPECT_EQ(replies_[0].type(), proto::CHECKPOINT);
}

TEST_F(CheckpointsTest, PeriodicCutsFollowTheScheduleAndAnOperatorGoesFirst) {
  auto c = Make(/*every=*/10);
  c->Tick(0, /*ready=*/false, 0);
  EXPECT_TRUE(sent_.empty()) << "nothing before the shard map is installed";
  c->Tick(3, true, 0);
  EXPECT_EQ(Last(1).cut().clock(), 10) << "asked early; written once the workers get there";
  c->Request({-1, 4, "operator"}, 1);
  EXPECT_TRUE(Last(1).cut().abort()) << "the periodic cut still waiting is called off";
  c->Tick(6, true, 1);
  EXPECT_EQ(Last(1).cut().clock(), 6);
  c->OnAnswer(1, Done(Last(1), 1), 2);
  c->OnAnswer(2, Done(Last(2), 1), 2);
  ASSERT_EQ(replies_.size(), 1u);
  c->Tick(7, true, 3);
  EXPECT_EQ(Last(1).cut().clock(), 10) << "the schedule goes on";
  c->OnAnswer(1, Done(Last(1), 1), 4);
  c->OnAnswer(2, Done(Last(2), 1), 4);
  c->Tick(10, true, 5);
  EXPECT_EQ(Last(1).cut().clock(), 20);
  c->Abandon(6);  // every worker finished: clock 20 will never come
  EXPECT_TRUE(Last(1).cut().abort());
  const size_t sent = sent_[1].size();
  c->Tick(10, false, 7);
  EXPECT_EQ(sent_[1].size(), sent) << "nothing new once the run is over";
}

TEST_F(CheckpointsTest, WithoutAFolderARequestIsRefused) {
  auto c = std::make_unique<Checkpoints>(
      CheckpointOptions{},
      Checkpoints::Actions{
          .send = [this](int32_t s, const proto::Header& h) { sent_[s].push_back(h); },
          .reply = [this](const Arrival&, const proto::Header& h) { replies_.push_back(h); },
          .live_servers = [this] { return servers_; },
          .describe = [] { return proto::CutManifest(); }});
  c->Request({-1, 3, "operator"}, 0);
  ASSERT_EQ(replies_.size(), 1u);
  EXPECT_EQ(replies_[0].type(), proto::ERROR);
  EXPECT_NE(replies_[0].error_message().find("--checkpoint_dir"), std::string::npos);
  c->Tick(5, true, 0);
  EXPECT_TRUE(sent_.empty());
}

}  // namespace
}  // namespace hetps
