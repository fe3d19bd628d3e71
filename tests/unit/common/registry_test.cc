#include "common/registry.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

struct Entry {
  int id;
};

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() {
    ParamDef k = ParamDef::Int("k", "auto", 1, 64, "how many");
    k.words = {"auto"};
    registry_.Add({"demo",
                   "a demonstration",
                   {ParamDef::Real("rate", "0.5", 0, 1, "a rate", /*min_open=*/true), k,
                    ParamDef::Choice("mode", "fast", {"fast", "exact"}, "how")}},
                  {7});
    registry_.Add({"plain", "no parameters", {}}, {8});
  }
  Registry<Entry> registry_{"widget"};
};

TEST_F(RegistryTest, DefaultsFillWhatIsNotGiven) {
  auto s = registry_.Parse("demo:rate=0.25");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name(), "demo");
  EXPECT_DOUBLE_EQ(s->Number("rate"), 0.25);
  EXPECT_TRUE(s->Is("k", "auto"));
  EXPECT_EQ(s->Text("mode"), "fast");
  EXPECT_EQ(registry_.EntryFor(s->name()).id, 7);
  EXPECT_EQ(registry_.EntryFor("plain").id, 8);
}

TEST_F(RegistryTest, TextIsCanonicalAndFullSpellsOutDefaults) {
  auto a = registry_.Parse("demo:mode=exact,rate=0.25");
  auto b = registry_.Parse("demo:rate=0.25,mode=exact");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ToString(), "demo:mode=exact,rate=0.25");
  EXPECT_EQ(a->ToString(), b->ToString());
  EXPECT_EQ(a->Full(), "demo:k=auto,mode=exact,rate=0.25");
  // What travels on the wire parses back to the same spec.
  auto again = registry_.Parse(a->Full());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Full(), a->Full());
  EXPECT_EQ(registry_.Parse("plain")->Full(), "plain");
}

// A parameter that acts only with another's value (ParamDef::OnlyWith) is refused when given
// without it, naming both; Full() leaves out what does not act, so it parses back.
TEST(RegistryConditionTest, AParameterThatWouldDoNothingIsRefused) {
  Registry<Entry> r{"widget"};
  r.Add({"mixer",
         "mixes",
         {ParamDef::Choice("curve", "flat", {"flat", "poly", "hinge"}, "the curve"),
          ParamDef::Real("power", "0.5", 0, 10, "poly: the power").OnlyWith("curve", {"poly"}),
          ParamDef::Real("knee", "2", 0, 10, "the knee").OnlyWith("curve", {"poly", "hinge"})}},
        {1});
  auto refused = r.Parse("mixer:power=2");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "widget 'mixer': 'power' acts only with curve=poly, and this spec has curve=flat: it "
            "would do nothing");
  EXPECT_FALSE(r.Parse("mixer:curve=hinge,power=2").ok());
  auto poly = r.Parse("mixer:curve=poly,power=2,knee=1");
  ASSERT_TRUE(poly.ok()) << poly.status().ToString();
  EXPECT_DOUBLE_EQ(poly->Number("power"), 2);
  EXPECT_EQ(poly->Full(), "mixer:curve=poly,knee=1,power=2");
  auto hinge = r.Parse("mixer:curve=hinge,knee=3");
  ASSERT_TRUE(hinge.ok());
  EXPECT_EQ(hinge->Full(), "mixer:curve=hinge,knee=3") << "power does not act: not spelled out";
  EXPECT_TRUE(r.Parse(hinge->Full()).ok());
  EXPECT_EQ(r.Parse("mixer")->Full(), "mixer:curve=flat");
  EXPECT_NE(r.Help().find("only with curve=poly|hinge"), std::string::npos) << r.Help();
}

TEST_F(RegistryTest, ErrorsNameWhatIsKnownAndTheRange) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"gizmo", "unknown widget 'gizmo' (known: demo, plain)"},
      {"demo:speed=1", "widget 'demo' has no parameter 'speed' (known: rate, k, mode)"},
      {"plain:x=1", "has no parameter 'x' (known: none)"},
      {"demo:rate=0", "rate=0: must be a number in (0, 1]"},
      {"demo:rate=fast", "not a number"},
      {"demo:k=2.5", "whole number in [1, 64] or auto"},
      {"demo:k=65", "k=65"},
      {"demo:mode=slow", "mode=slow: must be one of fast, exact"},
      {"demo:rate", "expected key=value"},
      {"demo:=1", "expected key=value"},
      {"demo:rate=0.1,rate=0.2", "given twice"},
      {"", "unknown widget ''"},
  };
  for (const auto& [text, message] : bad) {
    auto s = registry_.Parse(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(message), std::string::npos)
        << text << ": " << s.status().message();
  }
}

TEST_F(RegistryTest, WordsAreAcceptedWhereDeclared) {
  EXPECT_TRUE(registry_.Parse("demo:k=auto").ok());
  EXPECT_TRUE(registry_.Parse("demo:k=64").ok());
  EXPECT_FALSE(registry_.Parse("demo:rate=auto").ok());
}

TEST_F(RegistryTest, HelpAndMarkdownListEveryAlgorithmAndParameter) {
  const std::string help = registry_.Help();
  EXPECT_NE(help.find("demo"), std::string::npos);
  EXPECT_NE(help.find("a demonstration"), std::string::npos);
  EXPECT_NE(help.find("rate=0.5"), std::string::npos);
  EXPECT_NE(help.find("one of fast, exact"), std::string::npos);
  const std::string md = registry_.Markdown();
  EXPECT_EQ(md.rfind("| widget | what it does |", 0), 0u);
  EXPECT_NE(md.find("| `plain` | no parameters | none |"), std::string::npos);
  EXPECT_NE(md.find("`k=auto` how many (whole number in [1, 64] or auto)"), std::string::npos);
}

// Two algorithms of one kind sharing a name is a programming error: it stops the process at
// startup instead of one silently shadowing the other.
TEST(RegistryDeathTest, ANameRegisteredTwiceAborts) {
  Registry<Entry> registry("widget");
  registry.Add({"twin", "first", {}}, {1});
  EXPECT_DEATH(registry.Add({"twin", "second", {}}, {2}), "widget 'twin' registered twice");
}

}  // namespace
}  // namespace hetps
