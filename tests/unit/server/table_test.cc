// Sparse tables on one server: the row index, the initializer, the row-wise optimizers, eviction
// (every policy of the registry), admission and ttl (ALGORITHMS.md §10).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <unordered_map>

#include "common/zipf.h"
#include "durable.pb.h"
#include "server/aggregation/aggregator.h"
#include "server/consistency/controller.h"
#include "server/table/eviction.h"
#include "server/table/row_map.h"
#include "server/table/table_bucket.h"
#include "server/table/table_serving.h"
#include "server/table/table_shard.h"

namespace hetps {
namespace {

TEST(RowMapTest, MatchesAHashMapUnderChurn) {
  std::vector<uint64_t> keys;
  RowMap map(keys);
  std::unordered_map<uint64_t, uint32_t> ref;
  std::vector<uint32_t> free_rows;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 200000; ++step) {
    const uint64_t key = rng() % 5000;  // small key space: many hits, many erases
    auto it = ref.find(key);
    ASSERT_EQ(map.Find(key), it == ref.end() ? RowMap::kNone : it->second) << step;
    if (it == ref.end()) {
      uint32_t row;
      if (!free_rows.empty()) {
        row = free_rows.back();
        free_rows.pop_back();
      } else {
        row = static_cast<uint32_t>(keys.size());
        keys.push_back(0);
      }
      keys[row] = key;
      map.Insert(key, row);
      ref[key] = row;
    } else if (rng() % 2 == 0) {
      map.Erase(key);
      free_rows.push_back(it->second);
      ref.erase(it);
    }
    ASSERT_EQ(map.size(), static_cast<int64_t>(ref.size()));
  }
  for (const auto& [key, row] : ref) EXPECT_EQ(map.Find(key), row);
}

TableOptions Options(int64_t dim = 4) {
  TableOptions o;
  o.dim = dim;
  o.init = "normal";
  o.init_scale = 0.1;
  o.seed = 3;
  return o;
}

std::unique_ptr<Optimizer> Opt(const std::string& spec) { return std::move(*MakeOptimizer(spec)); }

std::unique_ptr<TableShard> Shard(const TableOptions& o, const Optimizer& opt, int64_t cap = 0,
                                  uint32_t ttl = 0) {
  return std::make_unique<TableShard>("emb", o, cap, ttl, opt,
                                      std::move(*MakeEviction(o.eviction)));
}

std::vector<float> Pulled(TableShard& s, uint64_t key, uint32_t now = 0) {
  std::vector<float> row(s.dim());
  s.Pull(&key, 1, row.data(), now);
  return row;
}

TEST(RowInitTest, ARowDependsOnlyOnSeedTableAndKey) {
  const TableOptions o = Options(16);
  std::vector<float> a(16), b(16), c(16), d(16);
  RowInit("emb", o).Fill(42, a.data());
  RowInit("emb", o).Fill(42, b.data());
  RowInit("other", o).Fill(42, c.data());
  TableOptions seeded = o;
  seeded.seed = 4;
  RowInit("emb", seeded).Fill(42, d.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  // Normal with std init_scale: over many keys the moments are close.
  double sum = 0, sq = 0;
  const int kKeys = 20000;
  for (uint64_t k = 0; k < kKeys; ++k) {
    RowInit("emb", o).Fill(k, a.data());
    for (float v : a) sum += v, sq += v * v;
  }
  const double n = kKeys * 16.0;
  EXPECT_NEAR(sum / n, 0, 0.002);
  EXPECT_NEAR(std::sqrt(sq / n), 0.1, 0.002);
}

TEST(TableShardTest, PullsOfMissingKeysReadTheInitializerAndStoreNothing) {
  auto opt = Opt("sgd:lr=1");
  auto s = Shard(Options(), *opt);
  std::vector<float> want(4);
  RowInit("emb", Options()).Fill(9, want.data());
  EXPECT_EQ(Pulled(*s, 9), want);
  EXPECT_EQ(s->rows(), 0);
  EXPECT_EQ(s->stats().misses, 1);
}

TEST(TableShardTest, APushCreatesTheRowFromItsInitializerThenApplies) {
  auto opt = Opt("sgd:lr=0.5");
  auto s = Shard(Options(), *opt);
  const uint64_t keys[] = {5, 6};
  const float g[] = {1, 2, 3, 4, -1, -2, -3, -4};
  ASSERT_TRUE(s->Push(keys, 2, g, 1.0f, 0).ok());
  EXPECT_EQ(s->rows(), 2);
  for (int k = 0; k < 2; ++k) {
    std::vector<float> init(4);
    RowInit("emb", Options()).Fill(keys[k], init.data());
    std::vector<float> row = Pulled(*s, keys[k]);
    for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(row[j], init[j] - 0.5f * g[k * 4 + j]);
  }
  EXPECT_EQ(s->stats().hits, 2);
}

// Lazy Adam equals Adam applied to each row alone with the row's own step count: a row pushed
// twice is at step 2 while a row pushed once is at step 1.
TEST(TableShardTest, LazyAdamEqualsAReferenceAppliedRowByRow) {
  auto opt = Opt("adam:lr=0.1");
  TableOptions o = Options(3);
  o.init = "zeros";
  auto s = Shard(o, *opt);
  const uint64_t a = 1, b = 2;
  const float g1[] = {1, -2, 0.5f}, g2[] = {0.3f, 0.1f, -1};
  ASSERT_TRUE(s->Push(&a, 1, g1, 1, 0).ok());
  ASSERT_TRUE(s->Push(&a, 1, g2, 1, 0).ok());
  ASSERT_TRUE(s->Push(&b, 1, g2, 1, 0).ok());
  auto reference = [](std::vector<const float*> grads) {
    std::vector<double> w(3, 0), m(3, 0), v(3, 0);
    for (size_t t = 1; t <= grads.size(); ++t) {
      const double alpha = 0.1 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
      for (int i = 0; i < 3; ++i) {
        m[i] = 0.9 * m[i] + 0.1 * grads[t - 1][i];
        v[i] = 0.999 * v[i] + 0.001 * grads[t - 1][i] * grads[t - 1][i];
        w[i] -= alpha * m[i] / (std::sqrt(v[i]) + 1e-8);
      }
    }
    return w;
  };
  const std::vector<double> wa = reference({g1, g2}), wb = reference({g2});
  const std::vector<float> ra = Pulled(*s, a), rb = Pulled(*s, b);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(ra[i], wa[i], 1e-5);  // float against double
    EXPECT_NEAR(rb[i], wb[i], 1e-5);
  }
}

TEST(TableShardTest, RowWiseAdagradKeepsOneSumPerRow) {
  auto opt = Opt("adagrad:lr=0.1,epsilon=0");
  TableOptions o = Options(2);
  o.init = "zeros";
  auto s = Shard(o, *opt);
  EXPECT_EQ(s->row_bytes(), 3 * 4);  // two values and one accumulator
  const uint64_t k = 7;
  const float g[] = {3, 4};  // mean of squares 12.5
  ASSERT_TRUE(s->Push(&k, 1, g, 1, 0).ok());
  const std::vector<float> row = Pulled(*s, k);
  EXPECT_NEAR(row[0], -0.1 * 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(row[1], -0.1 * 4 / std::sqrt(12.5), 1e-6);
}

TEST(FtrlTest, LargeL1KeepsWeightsAtZero) {
  auto opt = Opt("ftrl:lr=0.1,l1=100");
  TableOptions o = Options(4);
  o.init = "zeros";
  auto s = Shard(o, *opt);
  const uint64_t k = 1;
  const float g[] = {1, -3, 0.5f, 2};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s->Push(&k, 1, g, 1, 0).ok());
  for (float w : Pulled(*s, k)) EXPECT_EQ(w, 0.0f);
}

// l1 = l2 = beta = 0, one coordinate from w = 0: after gradient g, n = g^2, z = g, and
// w = -z / (sqrt(n) / alpha) = -alpha * sgn(g). A second gradient h: sigma = (sqrt(g^2 + h^2)
// - |g|) / alpha, z = g + h - sigma * w, n = g^2 + h^2, w = -alpha * z / sqrt(n).
TEST(FtrlTest, MatchesTheClosedFormByHand) {
  auto opt = Opt("ftrl:lr=0.5,beta=0");
  TableOptions o = Options(1);
  o.init = "zeros";
  auto s = Shard(o, *opt);
  const uint64_t k = 1;
  const float g = 2, h = -1;
  ASSERT_TRUE(s->Push(&k, 1, &g, 1, 0).ok());
  EXPECT_NEAR(Pulled(*s, k)[0], -0.5, 1e-6);
  ASSERT_TRUE(s->Push(&k, 1, &h, 1, 0).ok());
  const double sigma = (std::sqrt(5.0) - 2) / 0.5, z = 2 - 1 - sigma * -0.5;
  EXPECT_NEAR(Pulled(*s, k)[0], -0.5 * z / std::sqrt(5.0), 1e-6);
}

// Pushes one row of ones for each key in order (a touch each).
void Touch(TableShard& s, std::initializer_list<uint64_t> keys, uint32_t now = 0) {
  std::vector<float> g(s.dim(), 1.0f);
  for (uint64_t k : keys) ASSERT_TRUE(s.Push(&k, 1, g.data(), 1, now).ok());
}

TEST(EvictionTest, LruDropsTheLeastRecentlyTouched) {
  auto opt = Opt("sgd:lr=1");
  TableOptions o = Options();
  o.eviction = "lru";
  auto s = Shard(o, *opt, /*cap=*/3);
  Touch(*s, {1, 2, 3, 1});  // recency: 2 < 3 < 1
  Pulled(*s, 2);            // a pull touches too: 3 < 1 < 2
  Touch(*s, {4});           // drops 3
  EXPECT_EQ(s->Find(3), nullptr);
  EXPECT_NE(s->Find(1), nullptr);
  Touch(*s, {5});  // drops 1
  EXPECT_EQ(s->Find(1), nullptr);
  EXPECT_EQ(s->rows(), 3);
  EXPECT_EQ(s->stats().evicted, 2);
}

TEST(EvictionTest, LfuDropsTheLeastFrequentlyTouchedLeastRecentFirst) {
  auto opt = Opt("sgd:lr=1");
  TableOptions o = Options();
  o.eviction = "lfu";
  auto s = Shard(o, *opt, /*cap=*/3);
  Touch(*s, {1, 1, 1, 2, 2, 3});  // counts 1:3 2:2 3:1
  Touch(*s, {4});                 // drops 3 (count 1)
  EXPECT_EQ(s->Find(3), nullptr);
  Touch(*s, {4, 5});  // 4 has count 2 now, 2 has 2 and is older: 5 drops 2
  EXPECT_EQ(s->Find(2), nullptr);
  EXPECT_NE(s->Find(1), nullptr);
  EXPECT_NE(s->Find(4), nullptr);
}

TEST(EvictionTest, NoneRefusesAPushThatNeedsRowsPastTheCapAndChangesNothing) {
  auto opt = Opt("sgd:lr=1");
  auto s = Shard(Options(), *opt, /*cap=*/2);
  Touch(*s, {1, 2});
  const uint64_t keys[] = {1, 3};
  std::vector<float> g(8, 1.0f);
  const std::vector<float> before = Pulled(*s, 1);
  Status st = s->Push(keys, 2, g.data(), 1, 0);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("max_rows"), std::string::npos) << st.message();
  EXPECT_EQ(Pulled(*s, 1), before);
  EXPECT_EQ(s->rows(), 2);
  EXPECT_TRUE(s->Push(keys, 1, g.data(), 1, 0).ok());  // an existing row still trains
}

// Every policy of the registry: a random stream never holds more than the cap, and a dropped
// key's next touch starts it again from the initializer.
TEST(EvictionTest, EveryPolicyHoldsItsCapAndRecreatesFromTheInitializer) {
  auto opt = Opt("sgd:lr=1");
  for (const std::string& name : Evictions().Names()) {
    if (!(*MakeEviction(name))->drops()) continue;
    TableOptions o = Options();
    o.eviction = name;
    auto s = Shard(o, *opt, /*cap=*/50);
    std::mt19937_64 rng(1);
    for (int i = 0; i < 2000; ++i) {
      const uint64_t k = rng() % 200;
      Touch(*s, {k});
      ASSERT_LE(s->rows(), 50) << name;
    }
    EXPECT_GT(s->stats().evicted, 0) << name;
    uint64_t gone = 0;
    while (s->Find(gone) != nullptr) ++gone;
    std::vector<float> init(4);
    RowInit("emb", o).Fill(gone, init.data());
    EXPECT_EQ(Pulled(*s, gone), init) << name;
  }
}

TEST(AdmissionTest, AKeyGetsARowAtItsMinCountThPush) {
  auto opt = Opt("sgd:lr=1");
  TableOptions o = Options();
  o.min_count = 3;
  auto s = Shard(o, *opt);
  std::vector<float> init(4);
  RowInit("emb", o).Fill(8, init.data());
  Touch(*s, {8, 8});
  EXPECT_EQ(s->rows(), 0);
  EXPECT_EQ(s->stats().dropped, 2);
  EXPECT_EQ(Pulled(*s, 8), init);
  Touch(*s, {8});  // the third push creates the row and applies its gradient
  ASSERT_EQ(s->rows(), 1);
  EXPECT_EQ(s->stats().admitted, 1);
  const std::vector<float> row = Pulled(*s, 8);
  for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(row[j], init[j] - 1);
}

TEST(TtlTest, RowsUntouchedForTheTtlExpire) {
  auto opt = Opt("sgd:lr=1");
  TableOptions o = Options();
  o.ttl_clocks = 5;
  auto s = Shard(o, *opt, 0, TtlStamps(o));
  Touch(*s, {1, 2}, /*now=*/0);
  Touch(*s, {2}, /*now=*/3);
  std::vector<float> init(4);
  RowInit("emb", o).Fill(1, init.data());
  EXPECT_NE(Pulled(*s, 1, 4), init);  // touched at 0, read at 4: alive (and touched)
  EXPECT_EQ(s->Expire(8), 1);         // 1 touched at 4 lives; 2 touched at 3 expires
  EXPECT_EQ(s->Find(2), nullptr);
  EXPECT_EQ(Pulled(*s, 1, 20), init);  // expired at the read: the initializer's values
  EXPECT_EQ(s->rows(), 0);
  EXPECT_EQ(s->stats().expired, 2);
}

// An export hands over the rows pushed since the previous one after the keys dropped since
// (evicted or expired); a full one every row and no tombstone; a checkpoint keeps what the next
// export owes.
TEST(ExportTest, DeltasCarryTouchedRowsAndTombstonesOfDroppedKeys) {
  auto opt = Opt("sgd:lr=1");
  TableOptions o = Options();
  o.eviction = "lru";
  auto s = Shard(o, *opt, /*cap=*/3);
  auto run = [&](bool full) {
    std::map<uint64_t, float> rows;
    std::vector<uint64_t> tombstones;
    s->Export(
        full, [&](uint64_t k, const float* v) { rows[k] = v[0]; },
        [&](uint64_t k) {
          EXPECT_TRUE(rows.empty()) << "tombstones come first";
          tombstones.push_back(k);
        });
    return std::pair{rows, tombstones};
  };
  Touch(*s, {1, 2, 3});
  auto [rows, tombs] = run(false);
  EXPECT_EQ(rows.size(), 3u);
  EXPECT_TRUE(tombs.empty());
  Pulled(*s, 2);   // a pull changes no value: not exported
  Touch(*s, {4});  // evicts 1 (least recent)
  std::tie(rows, tombs) = run(false);
  EXPECT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows.contains(4));
  EXPECT_EQ(tombs, std::vector<uint64_t>{1});
  std::tie(rows, tombs) = run(false);
  EXPECT_TRUE(rows.empty() && tombs.empty());
  Touch(*s, {5});  // evicts 3
  proto::TableCheckpoint saved;
  s->Save(saved);
  auto restored = Shard(o, *opt, 3);
  ASSERT_TRUE(restored->Load(saved).ok());
  s = std::move(restored);
  std::tie(rows, tombs) = run(false);
  EXPECT_TRUE(rows.contains(5));
  EXPECT_EQ(rows.size(), 1u);
  EXPECT_EQ(tombs, std::vector<uint64_t>{3});
  std::tie(rows, tombs) = run(true);
  EXPECT_EQ(rows.size(), 3u);
  EXPECT_TRUE(tombs.empty());
}

TEST(TableBucketTest, ABspRoundSumsEachClocksPushesPerKey) {
  auto opt = Opt("sgd:lr=1");
  TensorSpec t("emb", {2}, 0, TableOptions{.dim = 2, .init = "zeros"});
  TableBucket bucket(t, 0, *opt);
  ASSERT_TRUE(bucket.error().ok());
  auto frame = [](std::vector<uint64_t> keys, std::vector<float> rows) {
    zmq::message_t m(keys.size() * 8 + rows.size() * 4);
    std::memcpy(m.data(), keys.data(), keys.size() * 8);
    std::memcpy(static_cast<char*>(m.data()) + keys.size() * 8, rows.data(), rows.size() * 4);
    return m;
  };
  bucket.Hold(0, 1, frame({1, 2}, {1, 1, 2, 2}), 2);
  bucket.Hold(0, 2, frame({2}, {10, 10}), 1);
  bucket.Hold(1, 1, frame({1}, {100, 100}), 1);
  RoundSpec round;
  round.clock = 0;
  EXPECT_EQ(bucket.ApplyRound(round, 0), 1);
  EXPECT_FLOAT_EQ(bucket.shard()->Find(1)[0], -1);
  EXPECT_FLOAT_EQ(bucket.shard()->Find(2)[1], -12);
  EXPECT_EQ(bucket.HeldBy(1), 1);  // clock 1 waits for its round
}

// A checkpoint holds the rows (values and optimizer state), the admission counts, the figures
// and the held pushes; loaded into a fresh bucket, every pull and round goes on identically.
TEST(TableBucketTest, ACheckpointRestoresRowsStateCountsAndHeldPushes) {
  auto opt = Opt("adagrad:lr=0.1");
  TableOptions o = Options(3);
  o.min_count = 2;
  o.ttl_clocks = 100;
  TensorSpec t("emb", {3}, 0, o);
  TableBucket a(t, 0, *opt), b(t, 0, *opt);
  std::vector<float> g(3, 0.5f);
  for (uint64_t k : {1, 2, 2, 3, 3, 3}) ASSERT_TRUE(a.shard()->Push(&k, 1, g.data(), 1, 7).ok());
  zmq::message_t held(8 + 12);
  const uint64_t key = 2;
  std::memcpy(held.data(), &key, 8);
  std::memcpy(static_cast<char*>(held.data()) + 8, g.data(), 12);
  a.Hold(4, 1, std::move(held), 1);
  proto::TableCheckpoint saved;
  a.Save(saved);
  ASSERT_TRUE(b.Load(saved).ok());
  EXPECT_EQ(b.shard()->rows(), a.shard()->rows());
  EXPECT_EQ(b.shard()->stats().dropped, a.shard()->stats().dropped);
  EXPECT_EQ(b.HeldBy(1), 1);
  for (auto* bucket : {&a, &b}) {
    const uint64_t one = 1;  // its second push admits it in both
    ASSERT_TRUE(bucket->shard()->Push(&one, 1, g.data(), 1, 8).ok());
    RoundSpec round;
    round.clock = 4;
    EXPECT_EQ(bucket->ApplyRound(round, 9), 1);
  }
  for (uint64_t k : {1, 2, 3}) {
    ASSERT_NE(a.shard()->Find(k), nullptr) << k;
    for (int j = 0; j < 4; ++j) EXPECT_EQ(a.shard()->Find(k)[j], b.shard()->Find(k)[j]) << k;
  }
  proto::TableCheckpoint wrong = saved;
  wrong.set_rows(saved.rows().substr(1));
  TableBucket c(t, 0, *opt);
  EXPECT_EQ(c.Load(wrong).code(), StatusCode::kMalformed);
}

TEST(TableBucketTest, ABadOptimizerOrEvictionSpecIsItsError) {
  auto opt = Opt("sgd");
  TableBucket a(TensorSpec("t", {2}, 0, TableOptions{.dim = 2, .optimizer = "adamw"}), 0, *opt);
  EXPECT_EQ(a.shard(), nullptr);
  EXPECT_NE(a.error().message().find("optimizer"), std::string::npos) << a.error().message();
  TableBucket b(TensorSpec("t", {2}, 0, TableOptions{.dim = 2, .eviction = "fifo"}), 0, *opt);
  EXPECT_NE(b.error().message().find("eviction"), std::string::npos) << b.error().message();
}

// Tables are defined under the controllers that apply on arrival or in lockstep rounds.
TEST(TablesDefinedTest, DerivedFromTheControllersSchedules) {
  const AlgorithmSpec sum = *Aggregators().Parse("sum");
  for (const std::string& name : Controllers().Names()) {
    const ApplySchedule schedule = Controllers().EntryFor(name).schedule;
    const bool want =
        schedule == ApplySchedule::kOnArrival || schedule == ApplySchedule::kLockstepRounds;
    EXPECT_EQ(TablesDefinedUnder(*Controllers().Parse(name), sum).ok(), want) << name;
  }
  const std::vector<std::string> names = TableControllers();
  for (const char* c : {"asp", "ssp", "dssp", "bsp"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), c), names.end()) << c;
  }
  Status s = TablesDefinedUnder(*Controllers().Parse("asp"), *Aggregators().Parse("fedasync"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
}

// The sampler's frequencies match k^-s / H(n, s) (within a few standard errors), and ranks stay
// in [1, n] for a range far beyond any table of weights.
TEST(ZipfTest, FrequenciesMatchThePowerLaw) {
  for (double s : {0.8, 1.0, 1.05, 1.5}) {
    const uint64_t n = 50;
    ZipfSampler zipf(n, s);
    std::mt19937_64 rng(5);
    const int kDraws = 400000;
    std::vector<int> count(n + 1, 0);
    for (int i = 0; i < kDraws; ++i) {
      const uint64_t k = zipf(rng);
      ASSERT_GE(k, 1u);
      ASSERT_LE(k, n);
      ++count[k];
    }
    double norm = 0;
    for (uint64_t k = 1; k <= n; ++k) norm += std::pow(k, -s);
    for (uint64_t k : {1, 2, 5, 20, 50}) {
      const double p = std::pow(k, -s) / norm;
      const double sd = std::sqrt(kDraws * p * (1 - p));
      EXPECT_NEAR(count[k], kDraws * p, 5 * sd) << "s " << s << " k " << k;
    }
  }
  ZipfSampler huge(uint64_t{1} << 40, 1.05);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 10000; ++i) ASSERT_LE(huge(rng), uint64_t{1} << 40);
}

}  // namespace
}  // namespace hetps
