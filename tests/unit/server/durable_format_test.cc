// The durable store's formats on their own: log records (server/log_record.h) and checkpoint
// files (server/checkpoint_file.h) round-trip, and every damaged form is refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/checkpoint_file.h"
#include "server/log_record.h"

namespace hetps {
namespace {

proto::LogRecord Push() {
  proto::LogRecord r;
  r.set_kind(proto::LogRecord::PUSH);
  r.set_worker(3);
  r.set_seq(11);
  return r;
}

TEST(LogRecordTest, AValueDecodesToItsRecordAndFloats) {
  const std::vector<float> floats = {1.5f, -2.0f, 3.25f};
  const std::string value =
      EncodeLogPrefix(Push()) + std::string(reinterpret_cast<const char*>(floats.data()), 12);
  proto::LogRecord record;
  std::string_view raw;
  ASSERT_TRUE(DecodeLogRecord(value, record, raw).ok());
  EXPECT_EQ(record.worker(), 3);
  EXPECT_EQ(record.seq(), 11);
  ASSERT_EQ(raw.size(), 12u);
  EXPECT_EQ(std::memcmp(raw.data(), floats.data(), 12), 0);
}

TEST(LogRecordTest, ShortLengthPastTheEndAndPartialFloatsAreMalformed) {
  const std::string good = EncodeLogPrefix(Push());
  proto::LogRecord record;
  std::string_view raw;
  for (const std::string& bad : {std::string("\x01\x00", 2), good.substr(0, good.size() - 1),
                                 good + "xyz", std::string("\x03\x00\x00\x00\xff\xff\xff", 7)}) {
    Status s = DecodeLogRecord(bad, record, raw);
    EXPECT_EQ(s.code(), StatusCode::kMalformed) << bad.size();
  }
}

TEST(LogRecordTest, KeysSortByPartitionThenLsnAndOnlyLogKeysHaveAnLsn) {
  EXPECT_LT(LogKey(1, 255), LogKey(1, 256));
  EXPECT_LT(LogKey(1, ~uint64_t{0}), LogKey(2, 0));
  EXPECT_EQ(LsnOf(LogKey(7, 123456789)), 123456789u);
  EXPECT_FALSE(LsnOf(CheckpointKey(7)).has_value());
  EXPECT_FALSE(LsnOf("l123").has_value());
}

class CheckpointFileTest : public ::testing::Test {
 protected:
  std::string path_ = (std::filesystem::temp_directory_path() /
                       ("hetps-checkpoint-file-" + std::to_string(::getpid())))
                          .string();
  void TearDown() override { std::filesystem::remove(path_); }
};

TEST_F(CheckpointFileTest, ReadsBackWhatWasWritten) {
  std::vector<float> values = {1, 2, 3, 4}, slots = {5, 6, 7, 8};
  proto::PartitionCheckpoint meta;
  meta.set_lsn(42);
  ASSERT_TRUE(WriteCheckpointFile(path_, meta, {values.data(), slots.data()}, 16, true).ok());
  std::vector<float> v(4), s(4);
  proto::PartitionCheckpoint read;
  ASSERT_TRUE(ReadCheckpointFile(path_, read, {v.data(), s.data()}, 16).ok());
  EXPECT_EQ(read.lsn(), 42u);
  EXPECT_EQ(v, values);
  EXPECT_EQ(s, slots);
}

TEST_F(CheckpointFileTest, AFlippedByteOrAnotherSizeIsRefusedAsDamaged) {
  std::vector<float> values = {1, 2, 3, 4};
  proto::PartitionCheckpoint meta;
  ASSERT_TRUE(WriteCheckpointFile(path_, meta, {values.data()}, 16, false).ok());
  std::vector<float> v(4), bigger(8);
  proto::PartitionCheckpoint read;
  Status other = ReadCheckpointFile(path_, read, {bigger.data()}, 32);
  EXPECT_EQ(other.code(), StatusCode::kMalformed);
  EXPECT_NE(other.message().find(path_), std::string::npos) << other.message();
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  Status flipped = ReadCheckpointFile(path_, read, {v.data()}, 16);
  EXPECT_EQ(flipped.code(), StatusCode::kMalformed);
  EXPECT_NE(flipped.message().find("hash"), std::string::npos) << flipped.message();
}

}  // namespace
}  // namespace hetps
