#include "worker/edge/availability.h"

#include <gtest/gtest.h>

#include <fstream>

namespace hetps {
namespace {

TEST(AvailabilityTest, AlwaysIsOnline) {
  auto a = MakeAvailability("always", 1);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE((*a)->Online(0));
  EXPECT_TRUE((*a)->Online(1e6));
  EXPECT_TRUE((*a)->OnlineThroughout(0, 1e6));
}

// Walks a timeline on a fine grid: the fraction online and the mean online and offline periods
// match the spec's means.
TEST(AvailabilityTest, OnOffPeriodsHaveTheirMeanDurationsAndAreSeeded) {
  auto a = MakeAvailability("onoff:on_s=60,off_s=20", 42);
  ASSERT_TRUE(a.ok());
  constexpr double kStep = 0.25, kHorizon = 400000;
  double online = 0;
  int on_periods = 0, off_periods = 0;
  bool was = true;
  std::vector<bool> first;
  for (double t = 0; t < kHorizon; t += kStep) {
    const bool on = (*a)->Online(t);
    if (t < 1000) first.push_back(on);
    if (on) online += kStep;
    if (on != was) (on ? on_periods : off_periods) += 1;
    was = on;
  }
  ++on_periods;  // the first, online from the start
  EXPECT_TRUE(first.front()) << "clients start online";
  EXPECT_NEAR(online / kHorizon, 0.75, 0.02);
  EXPECT_NEAR(online / on_periods, 60, 3);
  EXPECT_NEAR((kHorizon - online) / off_periods, 20, 1.5);
  // The same seed gives the same timeline, another seed another one.
  auto same = MakeAvailability("onoff:on_s=60,off_s=20", 42);
  auto other = MakeAvailability("onoff:on_s=60,off_s=20", 43);
  std::vector<bool> again, different;
  for (double t = 0; t < 1000; t += kStep) {
    again.push_back((*same)->Online(t));
    different.push_back((*other)->Online(t));
  }
  EXPECT_EQ(again, first);
  EXPECT_NE(different, first);
}

TEST(AvailabilityTest, NextOnlineAndOnlineThroughoutAgreeWithTheTimeline) {
  auto a = MakeAvailability("onoff:on_s=5,off_s=5", 7);
  ASSERT_TRUE(a.ok());
  // Find the first offline moment on a grid.
  double off = 0;
  while ((*a)->Online(off)) off += 0.01;
  EXPECT_FALSE((*a)->OnlineThroughout(0, off));
  EXPECT_TRUE((*a)->OnlineThroughout(0, off - 0.02));
  const double back = (*a)->NextOnline(off);
  EXPECT_GT(back, off);
  EXPECT_TRUE((*a)->Online(back));
  EXPECT_FALSE((*a)->Online(back - 1e-6));
  // Asking about earlier times after later ones gives the same answers.
  EXPECT_FALSE((*a)->OnlineThroughout(0, off));
}

std::string WriteTrace(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// A trace's online periods, per trace client, scaled, merged where they touch, and repeated
// after the trace's span (its latest offline time, 10 s here).
TEST(AvailabilityTest, ATraceGivesEachClientItsOnlinePeriods) {
  const std::string path = WriteTrace("trace.csv",
                                      "client,online_s,offline_s\n"
                                      "# client 0: online 0-2 and 5-8 (5-6 and 6-8 touch)\n"
                                      "0,0,2\n0,5,6\n0,6,8\n"
                                      "1,3,10\n");
  auto a = MakeAvailability("trace:file=" + path, 1, 0);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE((*a)->Online(0));
  EXPECT_TRUE((*a)->Online(1.9));
  EXPECT_DOUBLE_EQ((*a)->NextOnline(2), 5);
  EXPECT_TRUE((*a)->OnlineThroughout(5, 7.9)) << "5-6 and 6-8 are one period";
  EXPECT_FALSE((*a)->OnlineThroughout(5, 8));
  EXPECT_DOUBLE_EQ((*a)->NextOnline(8.5), 10) << "after the span the trace starts again";
  EXPECT_DOUBLE_EQ((*a)->NextOnline(12.5), 15);
  auto b = MakeAvailability("trace:file=" + path + ",scale=2", 1, 3);  // client 3 -> 1
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ((*b)->NextOnline(0), 6);
  EXPECT_TRUE((*b)->OnlineThroughout(6, 19.9));
  EXPECT_FALSE((*b)->OnlineThroughout(6, 20)) << "offline from 20 (the span) until 26";
  EXPECT_DOUBLE_EQ((*b)->NextOnline(21), 26);
}

TEST(AvailabilityTest, ABadTraceIsRefusedNamingTheLine) {
  EXPECT_EQ(MakeAvailability("trace:file=/nonexistent.csv", 1).status().code(),
            StatusCode::kNotFound);
  EXPECT_FALSE(MakeAvailability("trace", 1).ok()) << "no file given";
  const auto bad = MakeAvailability("trace:file=" + WriteTrace("bad.csv", "0,5,3\n"), 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.csv:1"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(MakeAvailability("trace:file=" + WriteTrace("gap.csv", "0,0,1\n2,0,1\n"), 1, 1).ok())
      << "trace client 1 has no online period";
  EXPECT_FALSE(MakeAvailability("trace:file=" + WriteTrace("empty.csv", "client\n"), 1).ok());
}

TEST(AvailabilityTest, BadSpecsAreRefused) {
  EXPECT_FALSE(MakeAvailability("sometimes", 1).ok());
  EXPECT_FALSE(MakeAvailability("onoff:on_s=0", 1).ok());
  EXPECT_FALSE(MakeAvailability("onoff:off_s=-1", 1).ok());
  EXPECT_FALSE(MakeAvailability("onoff:bogus=1", 1).ok());
}

}  // namespace
}  // namespace hetps
