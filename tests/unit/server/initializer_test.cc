#include "server/initializer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace hetps {
namespace {

Initializer Make(const std::string& mode, double scale = 0.1, uint64_t seed = 3) {
  auto init = Initializer::Make({mode, scale, seed});
  EXPECT_TRUE(init.ok());
  return *init;
}

TEST(InitializerTest, UnknownModeIsAnError) {
  auto bad = Initializer::Make({"xavier", 0.1, 1});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(InitializerTest, ValuesDoNotDependOnHowTheTensorIsCut) {
  for (const std::string mode : {"uniform", "normal"}) {
    Initializer init = Make(mode);
    std::vector<float> whole(1000), parts(1000);
    init.Fill("w", 0, whole.data(), 1000);
    init.Fill("w", 0, parts.data(), 333);
    init.Fill("w", 333, parts.data() + 333, 667);
    EXPECT_EQ(whole, parts) << mode;
  }
}

TEST(InitializerTest, SeedAndNameChangeTheValues) {
  std::vector<float> a(16), b(16), c(16);
  Make("uniform", 0.1, 1).Fill("w", 0, a.data(), 16);
  Make("uniform", 0.1, 2).Fill("w", 0, b.data(), 16);
  Make("uniform", 0.1, 1).Fill("v", 0, c.data(), 16);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

TEST(InitializerTest, UniformStaysInRangeAndNormalHasItsMoments) {
  const int n = 200000;
  std::vector<float> u(n), g(n);
  Make("uniform", 0.5).Fill("w", 0, u.data(), n);
  Make("normal", 0.5).Fill("w", 0, g.data(), n);
  double mean = 0, var = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_GE(u[i], -0.5f);
    ASSERT_LT(u[i], 0.5f);
    mean += g[i];
  }
  mean /= n;
  for (int i = 0; i < n; ++i) var += (g[i] - mean) * (g[i] - mean);
  var /= n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.01);
}

TEST(InitializerTest, ZerosAndWorker) {
  std::vector<float> z(8, 1.0f);
  Make("zeros").Fill("w", 5, z.data(), 8);
  EXPECT_EQ(z, std::vector<float>(8, 0.0f));
  EXPECT_TRUE(Make("worker").from_worker());
  EXPECT_FALSE(Make("zeros").from_worker());
}

}  // namespace
}  // namespace hetps
