#include "worker/layer_schedule.h"

#include <gtest/gtest.h>

#include <set>

namespace hetps {
namespace {

TEST(LayerScheduleTest, PublishedScheduleSendsDeepLayersOnAThirdOfRounds) {
  LayerSchedule s(/*deep_from=*/2);
  std::set<int64_t> deep;
  for (int64_t t = 0; t < 15; ++t) {
    EXPECT_TRUE(s.Uploads(0, t));
    EXPECT_TRUE(s.Uploads(1, t));
    if (s.Uploads(2, t)) deep.insert(t);
    EXPECT_EQ(s.Uploads(2, t), s.Uploads(7, t));
  }
  EXPECT_EQ(deep, (std::set<int64_t>{0, 11, 12, 13, 14}));
  EXPECT_TRUE(s.Uploads(2, 30));
  EXPECT_FALSE(s.Uploads(2, 31));
}

}  // namespace
}  // namespace hetps
