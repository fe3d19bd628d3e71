#include "common/status.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s = Status::SizeMismatch("partition 3 expects 4 elements");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), proto::SIZE_MISMATCH);
  EXPECT_EQ(s.ToString(), "SIZE_MISMATCH: partition 3 expects 4 elements");
}

TEST(StatusOrTest, HoldsValueOrError) {
  StatusOr<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  StatusOr<int> e = Status::NotFound("no such tensor");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), proto::NOT_FOUND);
}

}  // namespace
}  // namespace hetps
