// `hetps health`: its arguments (HETPS_SCHEDULER as the default) and the decision on a status
// document: the scheduler answering is enough without a node; a named node must be alive.
#include "cli/health.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

TEST(HealthTest, ArgumentsTakeTheSchedulerFromTheEnvironmentAndRoleWithRank) {
  auto a = ParseHealthArgs({"--role=server", "--rank=1"}, "tcp://10.0.0.1:7000");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->scheduler, "tcp://10.0.0.1:7000");
  EXPECT_EQ(a->role, "server");
  EXPECT_EQ(a->rank, 1);
  a = ParseHealthArgs({"--scheduler=tcp://h:1", "--timeout_ms=500"}, "tcp://other:2");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->scheduler, "tcp://h:1");
  EXPECT_EQ(a->timeout_ms, 500);
  EXPECT_FALSE(ParseHealthArgs({}, nullptr).ok()) << "no scheduler";
  EXPECT_FALSE(ParseHealthArgs({"--role=server"}, "tcp://h:1").ok()) << "a role needs a rank";
  EXPECT_FALSE(ParseHealthArgs({"--rank=2"}, "tcp://h:1").ok()) << "a rank needs a role";
  EXPECT_FALSE(ParseHealthArgs({"--role=client", "--rank=0"}, "tcp://h:1").ok());
  EXPECT_FALSE(ParseHealthArgs({"--rank=-1", "--role=worker"}, "tcp://h:1").ok());
  EXPECT_FALSE(ParseHealthArgs({"--timeout_ms=0"}, "tcp://h:1").ok());
  EXPECT_FALSE(ParseHealthArgs({"--verbose"}, "tcp://h:1").ok());
}

TEST(HealthTest, ANamedNodeMustBeAlive) {
  const std::string doc =
      R"({"servers":[{"rank":0,"state":"alive"},{"rank":1,"state":"recovering"}],
                              "workers":[{"rank":0,"state":"dead"}]})";
  HealthArgs args{.scheduler = "tcp://h:1"};
  EXPECT_TRUE(CheckHealth(args, doc).ok());
  args.role = "server";
  args.rank = 0;
  EXPECT_TRUE(CheckHealth(args, doc).ok());
  args.rank = 1;
  EXPECT_EQ(CheckHealth(args, doc).message(), "server 1 is recovering");
  args.rank = 2;
  EXPECT_EQ(CheckHealth(args, doc).code(), StatusCode::kNotFound);
  args.role = "worker";
  args.rank = 0;
  EXPECT_FALSE(CheckHealth(args, doc).ok());
  EXPECT_FALSE(CheckHealth(args, "not json").ok());
  EXPECT_FALSE(CheckHealth(args, R"({"workers": 3})").ok());
}

}  // namespace
}  // namespace hetps
