#include "common/int_list.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

TEST(IntListTest, ParsesPositiveIntegers) {
  auto v = ParsePositiveList("1,16,64");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<int64_t>{1, 16, 64}));
}

TEST(IntListTest, RejectsBadItemsNamingThem) {
  for (const char* bad : {"", "1,,2", "0", "-3", "4x", "x", "1,2,", "99999999999999999999"}) {
    auto v = ParsePositiveList(bad);
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto over = ParsePositiveList("5,4097", 4096);
  EXPECT_NE(over.status().message().find("'4097'"), std::string::npos);
}

}  // namespace
}  // namespace hetps
