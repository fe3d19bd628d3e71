// ShmSegment: names, sizes, what a second mapping sees, reservation, and what is left behind.
#include "common/shm_segment.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace hetps {
namespace {

std::string TestName(const char* what) { return fmt::format("/hetps-test-{}-{}", getpid(), what); }

bool InDevShm(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

TEST(ShmSegmentTest, OnlyProjectNamesAreValid) {
  EXPECT_TRUE(ShmSegment::ValidName("/hetps-12-ab-s0"));
  EXPECT_FALSE(ShmSegment::ValidName("/hetps-"));
  EXPECT_FALSE(ShmSegment::ValidName("hetps-1"));
  EXPECT_FALSE(ShmSegment::ValidName("/other-1"));
  EXPECT_FALSE(ShmSegment::ValidName("/hetps-../etc"));
  EXPECT_FALSE(ShmSegment::ValidName("/hetps-a/b"));
  EXPECT_FALSE(ShmSegment::ValidName("/hetps-" + std::string(200, 'a')));
  EXPECT_EQ(ShmSegment::Open("/tmp/x", 4096).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShmSegmentTest, TheOpenerSeesTheCreatorsBytesBothWays) {
  const std::string name = TestName("share");
  auto created = ShmSegment::Create(name, 1 << 20);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE((*created)->Reserve(1 << 20).ok());
  auto opened = ShmSegment::Open(name, 1 << 20);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  (*created)->data()[12345] = 42;
  EXPECT_EQ((*opened)->data()[12345], 42);
  (*opened)->data()[7] = 9;
  EXPECT_EQ((*created)->data()[7], 9);
  // Unlinked, the name is gone and both mappings stay valid.
  (*created)->Unlink();
  EXPECT_FALSE(InDevShm(name));
  (*opened)->data()[0] = 1;
  EXPECT_EQ((*created)->data()[0], 1);
  EXPECT_EQ(ShmSegment::Open(name, 1 << 20).status().code(), StatusCode::kUnavailable);
}

TEST(ShmSegmentTest, AWrongSizeOrAnExistingNameIsRefused) {
  const std::string name = TestName("size");
  auto created = ShmSegment::Create(name, 8192);
  ASSERT_TRUE(created.ok());
  auto opened = ShmSegment::Open(name, 4096);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opened.status().message().find("not 4096 bytes"), std::string::npos);
  EXPECT_FALSE(ShmSegment::Create(name, 8192).ok());  // O_EXCL
}

// Payloads pass through segments under --auth=curve too: one another user could reach (group or
// other permissions) is refused, never mapped.
TEST(ShmSegmentTest, ASegmentOthersCanReachIsRefused) {
  const std::string name = TestName("open");
  auto created = ShmSegment::Create(name, 4096);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(ShmSegment::Open(name, 4096).ok());
  ASSERT_EQ(chmod(("/dev/shm" + name).c_str(), 0644), 0);
  auto opened = ShmSegment::Open(name, 4096);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(opened.status().message().find("not private to this user"), std::string::npos)
      << opened.status().message();
}

TEST(ShmSegmentTest, TheCreatorLeavesNothingInDevShm) {
  const std::string name = TestName("gone");
  {
    auto created = ShmSegment::Create(name, 4096);
    ASSERT_TRUE(created.ok());
    EXPECT_TRUE(InDevShm(name));
    auto opened = ShmSegment::Open(name, 4096);
    ASSERT_TRUE(opened.ok());
  }
  EXPECT_FALSE(InDevShm(name));
}

TEST(ShmSegmentTest, ReservationGrowsUpToTheSizeAndOnlyTheCreatorReserves) {
  const std::string name = TestName("reserve");
  auto created = ShmSegment::Create(name, 1 << 20);
  ASSERT_TRUE(created.ok());
  EXPECT_EQ((*created)->reserved(), 0u);
  ASSERT_TRUE((*created)->Reserve(4096).ok());
  EXPECT_EQ((*created)->reserved(), 4096u);
  ASSERT_TRUE((*created)->Reserve(1024).ok());  // never shrinks
  EXPECT_EQ((*created)->reserved(), 4096u);
  ASSERT_TRUE((*created)->Reserve(size_t{1} << 30).ok());  // capped at the size
  EXPECT_EQ((*created)->reserved(), size_t{1} << 20);
  auto opened = ShmSegment::Open(name, 1 << 20);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ((*opened)->Reserve(4096).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace hetps
