// Replicator (server/replicator.h) against a scripted backup (a ROUTER socket in the test): a
// worker's reply waits for the acknowledgement of every backup that holds the partition, a
// record goes only to backups that hold the partition's snapshot, a refusal fences the primary,
// and a backup leaving the set is no longer waited for.
#include "server/replicator.h"

#include <gtest/gtest.h>

#include "common/message.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

constexpr int32_t kSelf = 7, kBackup = 3, kPartition = 5;

class ReplicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    replies_.bind(endpoint_);
    backup_.set(zmq::sockopt::rcvtimeo, 10000);
    backup_.bind("tcp://127.0.0.1:*");
    replicator_ = std::make_unique<Replicator>(ctx_, endpoint_, kSelf);
    node_.set_id(kBackup);
    node_.set_address(BoundEndpoint(backup_));
  }

  // The backup receives one shipment.
  Envelope Shipment() {
    auto env = Receive(backup_, zmq::recv_flags::none, /*routed=*/true);
    EXPECT_TRUE(env.has_value()) << "no shipment reached the backup";
    if (!env) return {};
    EXPECT_EQ(env->message.header.type(), proto::REPLICATE);
    EXPECT_EQ(env->identity, NodeIdentity(kSelf));
    return std::move(*env);
  }
  void Answer(const Envelope& shipment, bool refuse = false) {
    const proto::Header& h = shipment.message.header;
    proto::Header r = refuse ? ErrorReply(h, Status::FailedPrecondition("a newer primary"), 3)
                             : ReplyTo(h, proto::REPLICATE_ACK, kBackup);
    r.mutable_replica()->set_seq(h.replica().seq());
    SendRouted(backup_, shipment.identity, r);
  }
  // A reply released to the workers: [identity, header]; nullopt when none came in
  // `timeout_ms` (short where none may come, long where one must, on a loaded machine).
  std::optional<std::pair<std::string, proto::Header>> Released(int timeout_ms = 5000) {
    replies_.set(zmq::sockopt::rcvtimeo, timeout_ms);
    zmq::message_t identity;
    if (!replies_.recv(identity, zmq::recv_flags::none)) return std::nullopt;
    auto env = Receive(replies_, zmq::recv_flags::none, /*routed=*/false);
    if (!env) return std::nullopt;
    return std::make_pair(identity.to_string(), env->message.header);
  }
  // Names the backup to the replicator and ships it the partition's state, acknowledged.
  void Join() {
    std::vector<int32_t> fresh = replicator_->SetBackups({node_}, 1);
    ASSERT_EQ(fresh, std::vector<int32_t>{kBackup});
    replicator_->ShipSnapshot(part_, fresh);
    Envelope snapshot = Shipment();
    EXPECT_TRUE(snapshot.message.header.replica().snapshot());
    EXPECT_EQ(snapshot.message.header.partition(), kPartition);
    EXPECT_EQ(snapshot.message.header.replica().epoch(), 1);
    Answer(snapshot);
  }
  void ShipPush(uint64_t request_id, int32_t partition = kPartition) {
    proto::LogRecord record;
    record.set_kind(proto::LogRecord::PUSH);
    record.set_seq(static_cast<int64_t>(request_id));
    proto::Header reply;
    reply.set_type(proto::PUSH_REPLY);
    reply.set_request_id(request_id);
    replicator_->Ship(partition, record, values_, 4, nullptr, "worker-1", &reply);
  }

  const std::string endpoint_ = "inproc://replicator-test-replies";
  zmq::context_t ctx_{1};
  zmq::socket_t replies_{ctx_, zmq::socket_type::pull};
  zmq::socket_t backup_{ctx_, zmq::socket_type::router};
  std::unique_ptr<Replicator> replicator_;
  proto::NodeInfo node_;
  PartitionState part_{Partition{.id = kPartition, .length = 4}, 0};
  float values_[4] = {1, 2, 3, 4};
};

TEST_F(ReplicatorTest, AnUpdatesReplyWaitsForTheBackupsAcknowledgement) {
  Join();
  // A partition whose state the backup was not sent: nothing shipped, nothing waited for.
  ShipPush(41, kPartition + 1);
  auto early = Released();
  ASSERT_TRUE(early.has_value());
  EXPECT_EQ(early->second.request_id(), 41u);
  ShipPush(42);
  Envelope record = Shipment();
  ASSERT_EQ(record.message.payload.size(), 2u);
  ASSERT_EQ(record.message.payload[1].size(), sizeof(values_));
  EXPECT_EQ(std::memcmp(record.message.payload[1].data(), values_, sizeof(values_)), 0);
  proto::LogRecord shipped;
  ASSERT_TRUE(shipped.ParseFromArray(record.message.payload[0].data(),
                                     static_cast<int>(record.message.payload[0].size())));
  EXPECT_EQ(shipped.seq(), 42);
  EXPECT_FALSE(Released(300).has_value()) << "answered before the backup acknowledged";
  Answer(record);
  auto released = Released();
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->first, "worker-1");
  EXPECT_EQ(released->second.type(), proto::PUSH_REPLY);
  EXPECT_EQ(released->second.request_id(), 42u);
  EXPECT_FALSE(replicator_->fenced());
}

TEST_F(ReplicatorTest, ARefusalFencesThePrimaryAndFailsWhatWaits) {
  Join();
  ShipPush(42);
  Answer(Shipment(), /*refuse=*/true);
  auto released = Released();
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->second.type(), proto::ERROR);
  EXPECT_NE(released->second.error_message().find("fenced"), std::string::npos);
  EXPECT_TRUE(replicator_->fenced());
  ShipPush(43);  // nothing more is acknowledged
  auto later = Released();
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->second.type(), proto::ERROR);
}

TEST_F(ReplicatorTest, ABackupThatLeavesTheSetIsNoLongerWaitedFor) {
  Join();
  ShipPush(42);
  (void)Shipment();  // never acknowledged: the backup died
  EXPECT_FALSE(Released(300).has_value());
  replicator_->SetBackups({}, 1);
  auto released = Released();
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->second.type(), proto::PUSH_REPLY);
  EXPECT_FALSE(replicator_->active());
}

}  // namespace
}  // namespace hetps
