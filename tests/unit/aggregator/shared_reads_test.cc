// SharedReads: which server reply may answer a worker's pull at an aggregator
// (aggregator/shared_reads.h).
#include "aggregator/shared_reads.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

SharedReads::Reply ReplyOf(int64_t version) {
  proto::Header h;
  h.set_type(proto::PULL_REPLY);
  h.set_version(version);
  return {h, zmq::message_t(8)};
}

TEST(SharedReadsTest, APullJoinsOneOnItsWayForTheSameOrALaterClockInTheSameCodec) {
  SharedReads reads;
  reads.Sent(/*p=*/3, /*id=*/10, /*clock=*/5, "");
  EXPECT_EQ(reads.InFlight(1, 3, 5, ""), 10u);
  EXPECT_EQ(reads.InFlight(1, 3, 4, ""), 10u);    // an answer at clock 5 serves clock 4
  EXPECT_FALSE(reads.InFlight(1, 3, 6, ""));      // not a read at a later clock
  EXPECT_FALSE(reads.InFlight(1, 3, 5, "fp16"));  // nor in another codec
  EXPECT_FALSE(reads.InFlight(1, 4, 5, ""));      // nor of another partition
}

TEST(SharedReadsTest, AWorkerReadsOnlyRepliesAskedForAfterItsLastPushWasAcknowledged) {
  SharedReads reads;
  reads.Sent(3, 10, 5, "");
  reads.Acked(/*w=*/7, 3, /*id=*/12);  // its push went in sum 12, after pull 10 left
  EXPECT_FALSE(reads.InFlight(7, 3, 5, "")) << "pull 10 cannot show worker 7 its own push";
  EXPECT_EQ(reads.InFlight(8, 3, 5, ""), 10u) << "another worker may share it";
  reads.Acked(7, 3, 11);  // an older acknowledgement changes nothing
  EXPECT_FALSE(reads.InFlight(7, 3, 5, ""));
  reads.Sent(3, 13, 5, "");
  EXPECT_EQ(reads.InFlight(7, 3, 5, ""), 13u);
  reads.Acked(7, 4, 20);  // other partitions are other matters
  EXPECT_EQ(reads.InFlight(7, 3, 5, ""), 13u);
}

TEST(SharedReadsTest, TheNewestAnswerIsKeptUnderTheSameRules) {
  SharedReads reads;
  reads.Sent(3, 10, 5, "");
  reads.Sent(3, 11, 6, "");
  EXPECT_EQ(reads.Answered(3, 11, ReplyOf(2)).header.version(), 2);
  EXPECT_FALSE(reads.InFlight(1, 3, 6, ""));
  EXPECT_EQ(reads.Answered(3, 10, ReplyOf(1)).header.version(), 1);  // answered, not kept
  SharedReads::Reply* kept = reads.Kept(1, 3, 6, "");
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->header.version(), 2);
  EXPECT_EQ(kept->frame.size(), 8u);
  EXPECT_EQ(reads.Kept(1, 3, 7, ""), nullptr);
  reads.Acked(1, 3, 11);
  EXPECT_EQ(reads.Kept(1, 3, 6, ""), nullptr) << "asked before worker 1's push was acknowledged";
  EXPECT_NE(reads.Kept(2, 3, 6, ""), nullptr);
}

TEST(SharedReadsTest, AFailedPullIsNoLongerJoined) {
  SharedReads reads;
  reads.Sent(3, 10, 5, "");
  reads.Failed(3, 10);
  EXPECT_FALSE(reads.InFlight(1, 3, 5, ""));
  EXPECT_EQ(reads.Kept(1, 3, 5, ""), nullptr);
  reads.Failed(3, 99);  // unknown: nothing happens
}

}  // namespace
}  // namespace hetps
