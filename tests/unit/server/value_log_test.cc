// The value log (server/value_log.h): values come back as written, across a reopen; damage and
// a wrong record are detected by hash; a segment is written over only once every value in it
// is dead, after before_reuse; with none free the caller is told to keep the values itself.
#include "server/value_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "tests/scratch_dir.h"
namespace hetps {
namespace {

namespace fs = std::filesystem;

class ValueLogTest : public ::testing::Test {
 protected:
  std::unique_ptr<ValueLog> Open() {
    ValueLog::Options o;
    o.segments = 2;
    o.segment_bytes = 1 << 20;
    o.dead = [this](int32_t pid, uint64_t lsn) { return checkpointed_[pid] >= lsn; };
    o.before_reuse = [this] {
      ++reuse_calls_;
      return Status();
    };
    auto log = ValueLog::Open(dir_.string(), o);
    EXPECT_TRUE(log.ok()) << log.status().ToString();
    return log.ok() ? std::move(*log) : nullptr;
  }
  static std::vector<float> Values(int n, float base) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
    return v;
  }
  proto::ValueRef Put(ValueLog& log, int32_t pid, uint64_t lsn, const std::vector<float>& v) {
    auto ref = log.Append(pid, lsn, v.data(), static_cast<int64_t>(v.size() * sizeof(float)));
    EXPECT_TRUE(ref.ok()) << ref.status().ToString();
    EXPECT_TRUE(ref.ok() && ref->has_value()) << "the ring was full";
    return ref.ok() && ref->has_value() ? **ref : proto::ValueRef();
  }

  testing::ScratchDir scratch_{"hetps-value-log-test"};
  const fs::path dir_ = scratch_.path();
  std::map<int32_t, uint64_t> checkpointed_;  // pid -> lsn its checkpoint covers
  int reuse_calls_ = 0;
};

TEST_F(ValueLogTest, ValuesComeBackAsWrittenAlsoAfterAReopen) {
  const auto a = Values(1000, 1), b = Values(3000, -5);
  proto::ValueRef ra, rb;
  {
    auto log = Open();
    ra = Put(*log, 3, 7, a);
    rb = Put(*log, 4, 1, b);
    auto read = log->Read(ra, 3, 7);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(std::memcmp(*read, a.data(), a.size() * sizeof(float)), 0);
    EXPECT_FALSE(log->Read(ra, 3, 8).ok()) << "another record's value";
    EXPECT_FALSE(log->Read(ra, 4, 7).ok());
  }
  auto log = Open();
  auto read = log->Read(rb, 4, 1);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(std::memcmp(*read, b.data(), b.size() * sizeof(float)), 0);
  EXPECT_TRUE(log->Sync(rb).ok());
}

TEST_F(ValueLogTest, DamageIsDetectedByHash) {
  auto log = Open();
  const auto a = Values(1000, 1);
  const proto::ValueRef ref = Put(*log, 0, 1, a);
  {
    FILE* f = std::fopen((dir_ / ("segment-" + std::to_string(ref.segment()))).c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(ref.offset() + 64 + 100), SEEK_SET);
    std::fputc(0x5a, f);
    std::fclose(f);
  }
  auto read = log->Read(ref, 0, 1);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("hash"), std::string::npos) << read.status().message();
  proto::ValueRef outside = ref;
  outside.set_offset(1 << 20);
  EXPECT_FALSE(log->Read(outside, 0, 1).ok());
}

TEST_F(ValueLogTest, ASegmentIsWrittenOverOnlyOnceEveryValueInItIsDead) {
  auto log = Open();
  const auto v = Values(60000, 0);  // 240 KB: four fit a 1 MiB segment
  std::vector<proto::ValueRef> refs;
  for (uint64_t lsn = 1; lsn <= 8; ++lsn) refs.push_back(Put(*log, 0, lsn, v));
  EXPECT_NE(refs[0].segment(), refs[7].segment());
  auto full = log->Append(0, 9, v.data(), static_cast<int64_t>(v.size() * sizeof(float)));
  ASSERT_TRUE(full.ok());
  EXPECT_FALSE(full->has_value()) << "every value is live: nothing may be written over";
  EXPECT_EQ(reuse_calls_, 0);
  checkpointed_[0] = 4;  // the first segment's values are dead now
  const proto::ValueRef reused = Put(*log, 0, 9, v);
  EXPECT_EQ(reused.segment(), refs[0].segment());
  EXPECT_EQ(reuse_calls_, 1);
  EXPECT_EQ(log->reuses(), 1);
  EXPECT_TRUE(log->Read(refs[5], 0, 6).ok()) << "the other segment is untouched";
}

TEST_F(ValueLogTest, ValuesHeldAtRecoveryAreNotWrittenOver) {
  const auto v = Values(60000, 0);
  proto::ValueRef live;
  {
    auto log = Open();
    for (uint64_t lsn = 1; lsn <= 4; ++lsn) live = Put(*log, 1, lsn, v);
  }
  auto log = Open();
  log->Hold(live, 1, 4);  // recovery found a live record referring to it
  for (uint64_t lsn = 5; lsn <= 8; ++lsn) Put(*log, 2, lsn, v);  // fills the other segment
  auto full = log->Append(2, 9, v.data(), static_cast<int64_t>(v.size() * sizeof(float)));
  ASSERT_TRUE(full.ok());
  EXPECT_FALSE(full->has_value());
  EXPECT_TRUE(log->Read(live, 1, 4).ok());
}

}  // namespace
}  // namespace hetps
