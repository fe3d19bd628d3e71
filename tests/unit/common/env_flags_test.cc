// Flags from HETPS_* environment variables: set before the command line, which wins; a value a
// flag refuses is an error naming the variable; a HETPS_* variable that names no flag is
// reported, except the project's own non-flag variables.
#include "common/env_flags.h"

#include <gflags/gflags.h>
#include <gtest/gtest.h>

DEFINE_int32(env_test_count, 1, "a flag for this test");
DEFINE_string(env_test_name, "", "a flag for this test");

namespace hetps {
namespace {

TEST(EnvFlagsTest, TheEnvironmentSetsFlagsAndTheCommandLineWins) {
  const char* environment[] = {"PATH=/usr/bin",           "HETPS_ENV_TEST_COUNT=5",
                               "HETPS_ENV_TEST_NAME=a=b", "HETPS_NO_SUCH_FLAG=1",
                               "HETPS_CRASH_AT=x:1",      nullptr};
  const EnvironmentFlags env = ApplyEnvironmentFlags(environment);
  EXPECT_TRUE(env.status.ok()) << env.status.ToString();
  EXPECT_EQ(FLAGS_env_test_count, 5);
  EXPECT_EQ(FLAGS_env_test_name, "a=b");
  EXPECT_EQ(env.applied, (std::vector<std::string>{"HETPS_ENV_TEST_COUNT", "HETPS_ENV_TEST_NAME"}));
  EXPECT_EQ(env.unknown, std::vector<std::string>{"HETPS_NO_SUCH_FLAG"});

  int argc = 2;
  char arg0[] = "test", arg1[] = "--env_test_count=7";
  char* args[] = {arg0, arg1, nullptr};
  char** argv = args;
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  EXPECT_EQ(FLAGS_env_test_count, 7);
  EXPECT_EQ(FLAGS_env_test_name, "a=b");
}

TEST(EnvFlagsTest, AValueTheFlagRefusesIsAnErrorNamingTheVariable) {
  const char* environment[] = {"HETPS_ENV_TEST_COUNT=many", nullptr};
  const EnvironmentFlags env = ApplyEnvironmentFlags(environment);
  EXPECT_FALSE(env.status.ok());
  EXPECT_NE(env.status.message().find("HETPS_ENV_TEST_COUNT='many'"), std::string::npos)
      << env.status.message();
  EXPECT_TRUE(env.applied.empty());
  EXPECT_TRUE(ApplyEnvironmentFlags(nullptr).status.ok());
}

}  // namespace
}  // namespace hetps
