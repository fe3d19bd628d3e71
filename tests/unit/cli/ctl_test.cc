#include "cli/ctl.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

TEST(CtlTest, ParsesASetOfAConsistencySpec) {
  auto a = ParseCtlArgs({"--scheduler=tcp://h:7", "set", "consistency=dssp:lower=2"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->scheduler, "tcp://h:7");
  EXPECT_EQ(a->policy.consistency(), "dssp:lower=2");  // the servers validate and fill defaults
}

TEST(CtlTest, RefusesWhatItCannotSend) {
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
