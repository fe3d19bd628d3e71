// Secure aggregation's building blocks (common/secagg/): the cryptography from libsodium and
// libgfshare as it is used, the fixed point and masks, and the neighbour graph.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "common/secagg/crypto.h"
#include "common/secagg/graph.h"
#include "common/secagg/masks.h"

namespace hetps::secagg {
namespace {

std::string Text(const Seed& s) { return {reinterpret_cast<const char*>(s.data()), s.size()}; }

TEST(SecAggCryptoTest, ASealedShareOpensOnlyForItsRecipientFromItsSender) {
  const KeyPair a = NewKeyPair(), b = NewKeyPair(), c = NewKeyPair();
  auto sealed = Seal("share of a for b", b.pk, a.sk);
  ASSERT_TRUE(sealed.ok());
  auto opened = Open(*sealed, a.pk, b.sk);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ(*opened, "share of a for b");
  EXPECT_FALSE(Open(*sealed, c.pk, b.sk).ok());  // claimed to come from c: refused
  EXPECT_FALSE(Open(*sealed, a.pk, c.sk).ok());  // c cannot read b's share
  std::string tampered = *sealed;
  tampered.back() ^= 1;
  EXPECT_FALSE(Open(tampered, a.pk, b.sk).ok());
  EXPECT_FALSE(Open("short", a.pk, b.sk).ok());
  EXPECT_NE(*Seal("same", b.pk, a.sk), *Seal("same", b.pk, a.sk));  // fresh nonces
}

TEST(SecAggCryptoTest, BothSidesAgreeOnThePairSeedAndOnlyThey) {
  const KeyPair u = NewKeyPair(), v = NewKeyPair(), w = NewKeyPair();
  auto uv = AgreeSeed(u.sk, v.pk, 7, 3, 9);
  auto vu = AgreeSeed(v.sk, u.pk, 7, 9, 3);
  ASSERT_TRUE(uv.ok() && vu.ok());
  EXPECT_EQ(*uv, *vu);
  EXPECT_NE(*uv, *AgreeSeed(u.sk, w.pk, 7, 3, 9));
  EXPECT_NE(*uv, *AgreeSeed(u.sk, v.pk, 8, 3, 9));  // another round, another seed
  EXPECT_EQ(PublicOf(u.sk), u.pk);
  EXPECT_FALSE(AgreeSeed(u.sk, Key{}, 7, 3, 9).ok());  // the zero point agrees on nothing
}

TEST(SecAggCryptoTest, AnyThresholdOfSharesGivesTheSecretBack) {
  const std::string secret = Text(RandomSeed());
  const std::vector<uint8_t> xs = {1, 2, 3, 4, 5, 6, 7};
  const auto shares = Split(secret, xs, 4);
  ASSERT_EQ(shares.size(), xs.size());
  for (const std::vector<size_t>& pick : std::vector<std::vector<size_t>>{
           {0, 1, 2, 3}, {3, 4, 5, 6}, {0, 2, 4, 6}, {6, 5, 1, 0, 3}}) {
    std::vector<uint8_t> px;
    std::vector<std::string> ps;
    for (size_t i : pick) {
      px.push_back(xs[i]);
      ps.push_back(shares[i]);
    }
    auto got = Combine(px, ps);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, secret);
  }
  // Three shares of a 4-of-7 sharing give something else.
  EXPECT_NE(*Combine({1, 2, 3}, {shares[0], shares[1], shares[2]}), secret);
  EXPECT_FALSE(Combine({1, 1}, {shares[0], shares[0]}).ok());
  EXPECT_FALSE(Combine({0, 1}, {shares[0], shares[1]}).ok());
  EXPECT_FALSE(Combine({1, 2}, {shares[0], "x"}).ok());
}

// Words add up exactly: the decoded sum of the encodings is the sum of the rounded values, and
// each within half a step (clip / 2^bits per unit weight) of the real one.
TEST(SecAggMasksTest, FixedPointWordsSumExactlyWithinHalfAStep) {
  const FixedPoint fp{2.0, FixedPointBits(60 + 7.5 + 1)};
  EXPECT_EQ(fp.bits, 23);  // 2^30 / 68.5 = 15.7e6 >= 2^23
  std::mt19937 rng(3);
  std::normal_distribution<float> x(0, 1);
  const std::vector<double> weights = {60, 7.5, 1};
  const int64_t n = 1000;
  std::vector<uint32_t> sum(n, 0), words(n);
  std::vector<double> want(n, 0);
  for (double w : weights) {
    std::vector<float> v(n);
    for (float& f : v) f = x(rng);
    v[0] = 100;  // clipped to 2
    Encode(v.data(), n, w, fp, words.data());
    for (int64_t i = 0; i < n; ++i) {
      sum[i] += words[i];
      want[i] += w * std::clamp<double>(v[i], -fp.clip, fp.clip);
    }
  }
  std::vector<float> got(n);
  Decode(sum.data(), n, fp, got.data());
  const double step = fp.clip / std::ldexp(1.0, fp.bits);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(got[i], want[i], 3 * step / 2 + 1e-4 * std::abs(want[i]));
  EXPECT_NEAR(got[0], 2 * (60 + 7.5 + 1), 1e-3);
  EXPECT_EQ(FixedPointBits(1), 24);
  EXPECT_EQ(FixedPointBits(1e12), 0);
}

// A mask over a whole tensor equals the masks over its partitions (any offsets), and adding then
// subtracting it gives the words back.
TEST(SecAggMasksTest, MasksOfPartitionsLineUpWithTheWholeTensorAndCancel) {
  const Seed seed = RandomSeed();
  const int64_t n = 1000;
  std::vector<uint32_t> whole(n, 5);
  AddMask(seed, 4, 2, 0, n, 1, whole.data());
  for (int64_t cut : {1, 16, 37, 999}) {
    std::vector<uint32_t> parts(n, 5);
    AddMask(seed, 4, 2, 0, cut, 1, parts.data());
    AddMask(seed, 4, 2, cut, n - cut, 1, parts.data() + cut);
    EXPECT_EQ(parts, whole) << "cut at " << cut;
  }
  std::vector<uint32_t> other(n, 5);
  AddMask(seed, 4, 3, 0, n, 1, other.data());  // another tensor: another mask
  EXPECT_NE(other, whole);
  AddMask(seed, 4, 2, 0, n, -1, whole.data());
  EXPECT_EQ(whole, std::vector<uint32_t>(n, 5));
  std::vector<uint32_t> big(40000, 0);  // longer than one chunk of keystream
  AddMask(seed, 1, 0, 123, 40000, 1, big.data());
  std::vector<uint32_t> tail(100, 0);
  AddMask(seed, 1, 0, 123 + 39900, 100, 1, tail.data());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), big.end() - 100));
}

TEST(SecAggGraphTest, TheGraphIsRegularSymmetricAndSeeded) {
  std::vector<int32_t> members(50);
  std::iota(members.begin(), members.end(), 100);
  const auto g = Neighbours(members, 10, 7);
  ASSERT_EQ(g.size(), 50u);
  for (const auto& [u, near] : g) {
    EXPECT_EQ(near.size(), 10u);
    EXPECT_TRUE(std::is_sorted(near.begin(), near.end()));
    for (int32_t v : near) {
      EXPECT_NE(v, u);
      const auto& back = g.at(v);
      EXPECT_TRUE(std::binary_search(back.begin(), back.end(), u)) << u << " - " << v;
    }
  }
  EXPECT_EQ(g, Neighbours(members, 10, 7));
  EXPECT_NE(g, Neighbours(members, 10, 8));
  const auto complete = Neighbours({1, 2, 3}, 5, 1);
  EXPECT_EQ(complete.at(2), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(SharePoint(g.at(100), 100, g.at(100)[3]), 4);
  EXPECT_EQ(SharePoint(g.at(100), 100, 100), 11);  // the owner's own share
  EXPECT_EQ(SharePoint(g.at(100), 100, 1), 0);
}

// k grows with log n: the complete graph for small rounds, far fewer neighbours than clients for
// large ones; each choice keeps the chance that some secret loses its threshold within bounds.
TEST(SecAggGraphTest, ParametersKeepEverySecretRebuildableAtTheStatedDropout) {
  const GraphParams small = ChooseParams(20, 0.3);
  EXPECT_EQ(small.neighbours, 19);  // complete: SecAgg
  EXPECT_EQ(small.threshold, 11);   // of 20 holders
  for (int n : {20, 100, 1000}) {
    for (double dropout : {0.0, 0.1, 0.3}) {
      const GraphParams p = ChooseParams(n, dropout);
      EXPECT_EQ(p.threshold, (p.neighbours + 1) / 2 + 1);
      EXPECT_GE(p.neighbours, std::min(n - 1, LeastNeighbours(n)));
      if (p.neighbours < n - 1) {  // else nothing smaller reached the bound: the complete graph
        EXPECT_LE(n * BinomialBelow(p.neighbours, 1 - dropout, p.threshold), 1e-3);
      }
    }
  }
  EXPECT_EQ(LeastNeighbours(100), 22);  // 3 * 7 = 21, even
  EXPECT_EQ(ChooseParams(100, 0.1).neighbours, 22);
  EXPECT_EQ(ChooseParams(1000, 0.0).neighbours, 30);
  EXPECT_LT(ChooseParams(1000, 0.3).neighbours, 200);
  EXPECT_LT(ChooseParams(1000, 0.1).neighbours, ChooseParams(1000, 0.3).neighbours);
  EXPECT_NEAR(BinomialBelow(2, 0.5, 1), 0.25, 1e-12);
  EXPECT_NEAR(BinomialBelow(4, 0.5, 5), 1.0, 1e-12);
}

}  // namespace
}  // namespace hetps::secagg
