#include "common/subprocess.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace hetps {
namespace {

int ExitCode(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(SubprocessTest, StartsAProgramAndItsOutputGoesToTheFile) {
  const std::string out = ::testing::TempDir() + "subprocess-out.txt";
  SpawnOptions o;
  o.output_file = out;
  o.truncate = true;
  auto pid = Spawn({"/bin/sh", "-c", "echo hello; echo oops >&2; exit 3"}, o);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_EQ(ExitCode(*pid), 3);
  std::ifstream in(out);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), "hello\noops\n");
  std::filesystem::remove(out);
}

TEST(SubprocessTest, SearchesPathOnlyWhenAsked) {
  EXPECT_FALSE(Spawn({"true"}).ok());
  SpawnOptions o;
  o.search_path = true;
  auto pid = Spawn({"true"}, o);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_EQ(ExitCode(*pid), 0);
}

// A program that cannot be executed is an error at once, naming it and why; no child is left.
TEST(SubprocessTest, AProgramThatCannotStartIsAnError) {
  auto missing = Spawn({"/nonexistent/hetps-nothing"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/hetps-nothing: No such file"),
            std::string::npos)
      << missing.status().message();
  const std::string plain = ::testing::TempDir() + "subprocess-not-executable";
  std::ofstream(plain) << "#!/bin/sh\n";
  std::filesystem::permissions(plain, std::filesystem::perms::owner_read);
  auto denied = Spawn({plain});
  ASSERT_FALSE(denied.ok());
  EXPECT_NE(denied.status().message().find("Permission denied"), std::string::npos);
  std::filesystem::remove(plain);
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // nothing left to reap
}

TEST(SubprocessTest, RunCapturedReturnsTheOutputAndTheExitStatus) {
  auto run = RunCaptured({"sh", "-c", "echo out; echo err >&2; exit 3"}, true);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->output, "out\nerr\n");
  EXPECT_FALSE(run->succeeded());
  EXPECT_EQ(WEXITSTATUS(run->status), 3);
  EXPECT_TRUE(RunCaptured({"true"}, true)->succeeded());
  EXPECT_FALSE(RunCaptured({"/nonexistent/program"}).ok());
}

}  // namespace
}  // namespace hetps
