#include "cli/ctl.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace hetps {
namespace {

TEST(CtlTest, ParsesASetOfAConsistencySpec) {
  auto a = ParseCtlArgs({"--scheduler=tcp://h:7", "set", "consistency=dssp:lower=2"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->scheduler, "tcp://h:7");
  EXPECT_EQ(a->policy.consistency(), "dssp:lower=2");  // the servers validate and fill defaults
}

TEST(CtlTest, ParsesALayerScheduleAloneOrWithAConsistency) {
  auto a = ParseCtlArgs({"--scheduler=tcp://h:7", "set", "layer_schedule=fixed:deep=4"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->policy.layer_schedule(), "fixed:deep=4");  // the scheduler validates it
  EXPECT_TRUE(a->policy.consistency().empty());
  a = ParseCtlArgs({"--scheduler=tcp://h:7", "set", "consistency=asp", "layer_schedule=adaptive"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->policy.consistency(), "asp");
  EXPECT_EQ(a->policy.layer_schedule(), "adaptive");
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "set", "layer_schedule="}).ok());
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "set", "layer_schedule=:deep=2"}).ok());
}

TEST(CtlTest, ParsesAnExportWithItsDirMadeAbsolute) {
  auto a = ParseCtlArgs({"--scheduler=tcp://h:7", "export", "--table=emb", "--out=exp/./one"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->command, CtlArgs::Command::kExport);
  EXPECT_EQ(a->exports.table(), "emb");
  EXPECT_FALSE(a->exports.full());
  EXPECT_EQ(a->exports.dir(), (std::filesystem::current_path() / "exp/one").string());
  EXPECT_EQ(a->timeout_ms, 600000);  // writing a large table takes time
  a = ParseCtlArgs({"--scheduler=tcp://h:7", "export", "--full", "--table=t", "--out=/x"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->exports.full());
  EXPECT_EQ(a->exports.dir(), "/x");
}

TEST(CtlTest, ParsesADrainOfARank) {
  auto a = ParseCtlArgs({"--scheduler=tcp://h:7", "drain-server", "--rank=3"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->command, CtlArgs::Command::kDrain);
  EXPECT_EQ(a->rank, 3);
  EXPECT_EQ(a->timeout_ms, 70000);  // beyond the scheduler's 60 s bound on a drain
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"drain-server"},
                                              {"drain-server", "--rank=-1"},
                                              {"drain-server", "--rank=1", "--now"},
                                              {"drain-server", "--rank="}}) {
    std::vector<std::string> args = {"--scheduler=tcp://h:7"};
    args.insert(args.end(), bad.begin(), bad.end());
    EXPECT_FALSE(ParseCtlArgs(args).ok()) << bad.back();
  }
}

TEST(CtlTest, ParsesAMoveOfPartitions) {
  auto a = ParseCtlArgs({"--scheduler=tcp://h:7", "move", "--partitions=4,0,12", "--to=1"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->command, CtlArgs::Command::kMove);
  EXPECT_EQ(a->rank, 1);
  ASSERT_EQ(a->move.entries_size(), 3);
  EXPECT_EQ(a->move.entries(0).partition(), 4);
  EXPECT_EQ(a->move.entries(2).partition(), 12);
  EXPECT_EQ(a->move.entries(2).rank(), 1);
  EXPECT_EQ(a->timeout_ms, 100000);  // beyond the scheduler's 90 s bound on a move
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"move"},
                                              {"move", "--to=1"},
                                              {"move", "--partitions=1"},
                                              {"move", "--partitions=1,,2", "--to=1"},
                                              {"move", "--partitions=-1", "--to=1"},
                                              {"move", "--partitions=1", "--to=x"},
                                              {"move", "--partitions=1", "--to=1", "--now"}}) {
    std::vector<std::string> args = {"--scheduler=tcp://h:7"};
    args.insert(args.end(), bad.begin(), bad.end());
    EXPECT_FALSE(ParseCtlArgs(args).ok()) << bad.back();
  }
}

TEST(CtlTest, RefusesWhatItCannotSend) {
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "export", "--table=t"}).ok());
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "export", "--out=/x"}).ok());
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "export", "--out=", "--table=t"}).ok());
  EXPECT_FALSE(
      ParseCtlArgs({"--scheduler=tcp://h:7", "export", "--table=t", "--out=/x", "--since=3"}).ok());
  EXPECT_FALSE(ParseCtlArgs({"set", "consistency=ssp"}).ok());  // no scheduler
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "get"}).ok());
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "set", "staleness=2"}).ok());
  // Parameters belong in the spec; the old per-parameter keys are gone.
  EXPECT_FALSE(
      ParseCtlArgs({"--scheduler=tcp://h:7", "set", "consistency=ssp", "staleness=1"}).ok());
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "set", "consistency=:staleness=1"}).ok());
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "set", "consistency=ssp", "speed=2"}).ok());
  EXPECT_FALSE(ParseCtlArgs({"--scheduler=tcp://h:7", "set", "consistency"}).ok());
  EXPECT_FALSE(ParseCtlArgs({"--bogus", "set", "consistency=asp"}).ok());
}

}  // namespace
}  // namespace hetps
