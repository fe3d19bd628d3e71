// Secure aggregation end to end in one process: n clients (threads running the clients' side,
// worker/secure_aggregation.h) against the scheduler's side (FedRounds with
// --secure_aggregation, scheduler/secure_round.h), and the servers' unmasking
// (PartitionState::ApplySecure) over partitions that cut the tensor at odd offsets. Clients drop
// out at each step of the protocol; the applied step must be exactly the fixed-point weighted
// mean of the uploads the round kept (ALGORITHMS.md §11).
#include "scheduler/secure_round.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "common/secagg/masks.h"
#include "scheduler/fed_rounds.h"
#include "server/partition_store.h"
#include "worker/secure_aggregation.h"

namespace hetps {
namespace {

constexpr int64_t kLength = 300;  // one tensor, partitions of 37 floats

enum Step { kAdvertise = 0, kShare = 1, kUpload = 2, kReveal = 3, kNever = 9 };

class SecureCluster {
 public:
  // `keep` > 0: the round keeps the first `keep` uploads of its n clients (over-commitment).
  // `dp`: the run's --dp (adaptive clipping under distributed DP: each client also reports its
  // bit's masked word, Bit(id) being its noised centred value).
  SecureCluster(int n, const std::string& spec, int keep = 0, const std::string& dp = "none")
      : n_(n), live_(n) {
    FedRoundsOptions o;
    o.rounds = 1;
    o.dp = dp;
    o.clients_per_round = keep;
    o.overcommit = keep > 0 ? static_cast<double>(n) / keep : 1.0;
    o.secure_aggregation = spec;
    EXPECT_TRUE(ValidateFedRoundsOptions(o).ok());
    fed_ = std::make_unique<FedRounds>(o, Actions());
    for (int32_t id = 1; id <= n; ++id) fed_->CheckIn({id, 1, ""}, n, 0);
  }

  // Runs every client, client id dropping out before step drop[id] (kNever: it does not).
  void Run(const std::map<int32_t, Step>& drop) {
    std::vector<std::thread> threads;
    for (int32_t id = 1; id <= n_; ++id) {
      const Step at = drop.contains(id) ? drop.at(id) : kNever;
      threads.emplace_back([this, id, at] { Client(id, at); });
    }
    for (auto& t : threads) t.join();
  }

  // The servers: every upload held (kept or not), the close applied; the values after it.
  std::vector<float> Apply() const {
    auto map = *ShardMap::Build({{"w", {kLength}, 0}}, 1, 37 * 4);
    auto sgd = std::move(*MakeOptimizer("sgd:lr=1.0"));
    auto zeros = *Initializer::Make({"zeros", 0, 1});
    PartitionStore store(map, 0, *sgd, zeros);
    RoundSpec round;
    round.clock = 0;
    round.workers.assign(close_->workers().begin(), close_->workers().end());
    round.only_clock = true;
    round.one_step = true;
    if (close_->has_secure()) round.secure = std::make_shared<proto::SecureClose>(close_->secure());
    std::vector<float> values(kLength);
    for (const Partition& p : map.partitions()) {
      PartitionState* part = store.Find(p.id);
      for (const auto& [id, words] : uploads_) {
        part->Hold(0, id, zmq::message_t(words.data() + p.offset, p.length * sizeof(uint32_t)),
                   Weight(id));
      }
      // A close without workers applies nothing (consistency "selected"): the next close drops
      // what it left held.
      if (!round.workers.empty()) {
        part->ApplyRound(*sgd, round);
        EXPECT_EQ(part->held_clocks(), 0u);
      }
      std::copy(part->values(), part->values() + p.length, values.begin() + p.offset);
    }
    return values;
  }

  // What the step must be: minus the fixed-point weighted mean of `kept`'s updates.
  std::vector<float> Expected(const std::vector<int32_t>& kept) const {
    const secagg::FixedPoint fp{close_->secure().clip(), close_->secure().bits()};
    std::vector<uint32_t> sum(kLength, 0), words(kLength);
    double total = 0;
    for (int32_t id : kept) {
      secagg::Encode(updates_.at(id).data(), kLength, Weight(id), fp, words.data());
      for (int64_t i = 0; i < kLength; ++i) sum[i] += words[i];
      total += Weight(id);
    }
    std::vector<float> mean(kLength);
    secagg::Decode(sum.data(), kLength, fp, mean.data());
    for (float& v : mean) v = -v * static_cast<float>(1 / total);
    return mean;
  }

  const std::optional<proto::FedRound>& close() const { return close_; }
  const std::map<int32_t, std::vector<uint32_t>>& uploads() const { return uploads_; }
  const std::vector<float>& update(int32_t id) const { return updates_.at(id); }
  static double Weight(int32_t id) { return 10.0 + id; }
  static double Bit(int32_t id) { return (id % 3 == 0 ? 0.5 : -0.5) + 0.01 * id; }
  const FedRounds& fed() const { return *fed_; }
  const std::map<int32_t, uint32_t>& count_words() const { return count_words_; }

 private:
  FedRounds::Actions Actions() {
    return {.answer_checkin = [this](const Arrival& a,
                                     const proto::FedRound& r) { tasks_[a.worker] = r; },
            .answer_upload =
                [this](const Arrival& a, const proto::FedRound& r) {
                  upload_answers_[a.worker] = r;
                  cv_.notify_all();
                },
            .answer_watch = [](const Arrival&, const proto::FedRound&) {},
            .close = [this](const proto::FedRound& r) { close_ = r; },
            .live_servers = [] { return std::vector<int32_t>{}; },
            .rank_of = [](int32_t id) { return id - 1; },
            .answer_secagg =
                [this](const Arrival& a, const proto::SecAgg& s) {
                  answers_.insert_or_assign(a.worker, s);
                  cv_.notify_all();
                },
            .refuse =
                [this](const Arrival& a, const Status& s) {
                  answers_.insert_or_assign(a.worker, s);
                  cv_.notify_all();
                }};
  }

  void Die(int32_t id) {
    std::lock_guard lock(m_);
    fed_->RemoveClient(id, --live_, 1);
  }

  StatusOr<proto::SecAgg> Exchange(int32_t id, Step drop, const proto::SecAgg& request) {
    const Step step = request.phase() == proto::SecAgg::ADVERTISE ? kAdvertise
                      : request.phase() == proto::SecAgg::SHARE   ? kShare
                                                                  : kReveal;
    if (step == drop) {
      Die(id);
      return Status::Aborted("dropped out");
    }
    std::unique_lock lock(m_);
    answers_.erase(id);
    fed_->Secure({id, 2, ""}, request, 1);
    cv_.wait(lock, [&] { return answers_.contains(id); });
    return answers_.at(id);
  }

  void Client(int32_t id, Step drop) {
    SecureUpload secure(id,
                        [this, id, drop](const proto::SecAgg& r) { return Exchange(id, drop, r); });
    if (!secure.Setup(tasks_.at(id).secagg(), Weight(id)).ok()) return;
    if (drop == kUpload) return Die(id);
    std::vector<float> x(kLength);
    std::mt19937 rng(id);
    std::normal_distribution<float> normal(0, 0.5f);
    for (float& v : x) v = normal(rng);
    std::vector<uint32_t> words(kLength);
    secure.Mask(0, 0, x.data(), kLength, words.data());
    proto::FedRound report, answer;
    report.set_round(0);
    const proto::FedRound& task = tasks_.at(id);
    if (task.has_dp_count_noise()) {
      report.set_within_masked(secure.MaskCount(
          Bit(id), secagg::CountFixedPoint(task.dp_count_noise(), task.secagg().kept())));
    }
    {
      std::unique_lock lock(m_);
      updates_[id] = x;
      uploads_[id] = words;
      if (report.has_within_masked()) count_words_[id] = report.within_masked();
      fed_->Report(id, report);
      fed_->Uploaded({id, 3, ""}, 0, live_, 1);
      cv_.wait(lock, [&] { return upload_answers_.contains(id); });
      answer = upload_answers_.at(id);
    }
    if (answer.has_secagg()) (void)secure.Unmask(answer.secagg(), answer.kept());
  }

  int n_;
  int live_;
  std::unique_ptr<FedRounds> fed_;
  std::mutex m_;
  std::condition_variable cv_;
  std::map<int32_t, proto::FedRound> tasks_;
  std::map<int32_t, StatusOr<proto::SecAgg>> answers_;
  std::map<int32_t, proto::FedRound> upload_answers_;
  std::optional<proto::FedRound> close_;
  std::map<int32_t, std::vector<uint32_t>> uploads_;
  std::map<int32_t, std::vector<float>> updates_;
  std::map<int32_t, uint32_t> count_words_;
};

// The clients dropping out: `count` of them, the highest ids first, before `step`.
std::map<int32_t, Step> Drops(int n, int count, Step step, int skip = 0) {
  std::map<int32_t, Step> d;
  for (int i = 0; i < count; ++i) d[n - skip - i] = step;
  return d;
}

void ExpectExactMean(const SecureCluster& c, const std::vector<int32_t>& kept) {
  ASSERT_TRUE(c.close().has_value());
  ASSERT_TRUE(c.close()->has_secure());
  EXPECT_EQ(std::vector<int32_t>(c.close()->workers().begin(), c.close()->workers().end()), kept);
  const std::vector<float> got = c.Apply();
  const std::vector<float> want = c.Expected(kept);
  for (int64_t i = 0; i < kLength; ++i) ASSERT_NEAR(got[i], want[i], 1e-6) << "coordinate " << i;
  // ... and the fixed point is close to the real weighted mean.
  double total = 0;
  std::vector<double> mean(kLength, 0);
  for (int32_t id : kept) {
    total += SecureCluster::Weight(id);
    for (int64_t i = 0; i < kLength; ++i) mean[i] += SecureCluster::Weight(id) * c.update(id)[i];
  }
  for (int64_t i = 0; i < kLength; ++i) EXPECT_NEAR(got[i], -mean[i] / total, 1e-4);
}

std::vector<int32_t> Range(int32_t from, int32_t to) {
  std::vector<int32_t> v;
  for (int32_t i = from; i <= to; ++i) v.push_back(i);
  return v;
}

TEST(SecureRoundTest, WithNoDropoutTheServersApplyExactlyTheWeightedMean) {
  SecureCluster c(20, "secagg+");
  c.Run({});
  ExpectExactMean(c, Range(1, 20));
  // What the servers held of each client is masked: its words are not its encoding.
  const secagg::FixedPoint fp{c.close()->secure().clip(), c.close()->secure().bits()};
  for (const auto& [id, words] : c.uploads()) {
    std::vector<uint32_t> plain(kLength);
    secagg::Encode(c.update(id).data(), kLength, SecureCluster::Weight(id), fp, plain.data());
    int same = 0;
    for (int64_t i = 0; i < kLength; ++i) same += words[i] == plain[i];
    EXPECT_LE(same, 2) << "client " << id;
  }
}

// 10% and 30% of the clients drop out before each step in turn: before advertising and before
// sharing they are left out; after sharing (no upload) their pairwise masks are removed with
// their rebuilt mask keys; after uploading (no reveal) their uploads count, unmasked from the
// others' shares.
TEST(SecureRoundTest, DropoutsAtEachStepLeaveTheExactMeanOfTheKeptUploads) {
  for (int count : {2, 6}) {
    for (Step step : {kAdvertise, kShare, kUpload, kReveal}) {
      SCOPED_TRACE(testing::Message() << count << " of 20 drop before step " << step);
      SecureCluster c(20, "secagg+");
      c.Run(Drops(20, count, step));
      ExpectExactMean(c, step == kReveal ? Range(1, 20) : Range(1, 20 - count));
    }
  }
}

TEST(SecureRoundTest, TenPercentDroppingAtEveryStepInTurn) {
  SecureCluster c(20, "secagg+");
  std::map<int32_t, Step> drop;
  for (Step step : {kAdvertise, kShare, kUpload, kReveal}) {
    for (int i = 0; i < 2; ++i) drop[20 - 2 * static_cast<int>(step) - i] = step;
  }
  c.Run(drop);
  ExpectExactMean(c, Range(1, 14));  // 15 and 16 uploaded, then dropped: still in the sum
}

// SecAgg+: 40 clients, 10 neighbours each (threshold 6 of 11), 10% dropping after sharing and 10%
// after uploading.
TEST(SecureRoundTest, ASparseGraphUnmasksWithDropouts) {
  SecureCluster c(40, "secagg+:neighbours=10");
  std::map<int32_t, Step> drop = Drops(40, 4, kUpload);
  for (auto& [id, step] : Drops(40, 4, kReveal, 4)) drop[id] = step;
  c.Run(drop);
  ExpectExactMean(c, Range(1, 36));
}

// Over-commitment: 20 selected, the first 10 uploads kept. A secret needs 11 of its 20 holders'
// shares, more than the kept clients hold: the late ones, still holders, reveal too.
TEST(SecureRoundTest, AnOverCommittedRoundIsUnmaskedWithTheLateClientsShares) {
  SecureCluster c(20, "secagg+", 10);
  c.Run({});
  ASSERT_TRUE(c.close().has_value());
  std::vector<int32_t> kept(c.close()->workers().begin(), c.close()->workers().end());
  EXPECT_EQ(kept.size(), 10u);
  ExpectExactMean(c, kept);
}

// Too few clients left to reveal the threshold of shares: the round applies nothing, and every
// upload held for it is dropped.
TEST(SecureRoundTest, ARoundThatCannotBeUnmaskedAppliesNothing) {
  SecureCluster c(20, "secagg+");
  c.Run(Drops(20, 12, kReveal));  // 8 of 20 reveal, t = 11
  ASSERT_TRUE(c.close().has_value());
  EXPECT_EQ(c.close()->workers_size(), 0);
  EXPECT_FALSE(c.close()->has_secure());
  for (float v : c.Apply()) ASSERT_EQ(v, 0.0f);
}

// The scheduler's side refuses what does not fit the protocol.
// The servers' side of FedBuff's cohorts: two cohorts' masked uploads held under their task
// numbers (3 and 4); cohort 4 closes first and leaves cohort 3's uploads held (a synchronous
// round would drop every earlier clock), and each step is its weighted mean times the mean of
// its uploads' (1 + staleness)^-a. (Plain encodings stand for the masked words here: removing
// masks is checked above.)
TEST(SecureRoundTest, ACohortsStepLeavesTheOtherCohortsHeldAndWeighsItsStaleness) {
  auto map = *ShardMap::Build({{"w", {4}, 0}}, 1, 64);
  auto sgd = std::move(*MakeOptimizer("sgd:lr=1.0"));
  auto zeros = *Initializer::Make({"zeros", 0, 1});
  PartitionStore store(map, 0, *sgd, zeros);
  PartitionState* part = store.Find(map.partitions()[0].id);
  const secagg::FixedPoint fp{8, 16};
  auto hold = [&](int64_t clock, int32_t worker, float x, double weight, int64_t base) {
    std::vector<float> update(4, x);
    std::vector<uint32_t> words(4);
    secagg::Encode(update.data(), 4, weight, fp, words.data());
    part->Hold(clock, worker, zmq::message_t(words.data(), words.size() * sizeof(uint32_t)), weight,
               base);
  };
  hold(3, 1, 1.0f, 1, 0);
  hold(3, 2, 3.0f, 3, 0);
  hold(4, 3, 2.0f, 1, 0);
  hold(4, 4, 4.0f, 1, 0);
  auto close = std::make_shared<proto::SecureClose>();
  close->set_clip(fp.clip);
  close->set_bits(fp.bits);
  RoundSpec cohort;
  cohort.per_push = true;
  cohort.secure = close;
  cohort.staleness_exponent = 0.5;
  cohort.clock = 4;
  cohort.workers = {3, 4};
  EXPECT_EQ(part->ApplyRound(*sgd, cohort), 1);
  EXPECT_EQ(part->held_clocks(), 1u) << "cohort 3's uploads wait for their own close";
  EXPECT_NEAR(part->values()[0], -3.0, 1e-4) << "staleness 0: the mean of 2 and 4";
  cohort.clock = 3;
  cohort.workers = {1, 2};
  EXPECT_EQ(part->ApplyRound(*sgd, cohort), 1);
  EXPECT_EQ(part->held_clocks(), 0u);
  // One step applied since their pull: (1 + 1)^-0.5 times the weighted mean (1 + 9) / 4.
  EXPECT_NEAR(part->values()[0], -3.0 - 2.5 / std::sqrt(2.0), 1e-4);
}

// Adaptive clipping under distributed DP: each client's noised bit travels masked like its
// upload, and the scheduler, removing the masks the servers remove, reads only their sum: the
// next clip is the step that sum gives (to the fixed point's precision), with every client
// kept, and with an over-committed round where clients drop after sharing and after uploading.
TEST(SecureRoundTest, DistributedAdaptiveClippingStepsOnTheUnmaskedSumOfTheBits) {
  const std::string dp = "distributed:clip=1,noise=1,quantile=0.5";
  for (const auto& [n, keep, drops] :
       {std::tuple{10, 0, std::map<int32_t, Step>{}},
        std::tuple{14, 8, std::map<int32_t, Step>{{14, kUpload}, {2, kReveal}}}}) {
    SecureCluster c(n, "secagg+", keep, dp);
    c.Run(drops);
    ASSERT_TRUE(c.close().has_value() && c.close()->has_secure());
    double sum = 0;
    const auto kept = static_cast<double>(c.close()->workers_size());
    for (int32_t id : c.close()->workers()) sum += SecureCluster::Bit(id);
    const double fraction = (sum + kept / 2) / kept;
    EXPECT_NEAR(c.fed().privacy().clip(), std::exp(-0.2 * (fraction - 0.5)), 1e-5)
        << n << " clients, " << kept << " kept";
    int plain = 0;  // a masked word that is its value's encoding: chance, 1 in 2^32
    const secagg::FixedPoint fp = secagg::CountFixedPoint(1.0, keep > 0 ? keep : n);
    for (const auto& [id, word] : c.count_words()) {
      uint32_t encoded = 0;
      const float bit = static_cast<float>(SecureCluster::Bit(id));
      secagg::Encode(&bit, 1, 1.0, fp, &encoded);
      plain += word == encoded;
    }
    EXPECT_EQ(plain, 0);
    EXPECT_FALSE(c.count_words().empty());
    ExpectExactMean(c,
                    std::vector<int32_t>(c.close()->workers().begin(), c.close()->workers().end()));
  }
}

TEST(SecureRoundTest, TheSchedulerRefusesImpersonationReplaysAndStrayShares) {
  auto options = *ParseSecureAggregation("secagg+");
  SecureRound r(5, {1, 2, 3}, options, 1, 3);
  auto keys = [](int32_t id) {
    proto::SecAgg a;
    a.set_phase(proto::SecAgg::ADVERTISE);
    proto::SecAggKeys* k = a.add_keys();
    k->set_worker(id);
    k->set_cipher_pk(std::string(32, 'c'));
    k->set_mask_pk(std::string(32, 'm'));
    k->set_self_hash(std::string(32, 'h'));
    k->set_weight(1);
    return a;
  };
  EXPECT_EQ(r.Advertise(4, keys(4)).code(), StatusCode::kPermissionDenied);  // not selected
  EXPECT_EQ(r.Advertise(1, keys(2)).code(), StatusCode::kMalformed);         // 2's keys from 1
  proto::SecAgg short_key = keys(1);
  short_key.mutable_keys(0)->set_mask_pk("x");
  EXPECT_EQ(r.Advertise(1, short_key).code(), StatusCode::kMalformed);
  EXPECT_TRUE(r.Advertise(1, keys(1)).ok());
  EXPECT_EQ(r.Advertise(1, keys(1)).code(), StatusCode::kFailedPrecondition);  // again
  proto::SecAgg share;
  share.set_phase(proto::SecAgg::SHARE);
  EXPECT_EQ(r.Share(1, share).code(), StatusCode::kFailedPrecondition);  // out of its phase
  EXPECT_TRUE(r.Advertise(2, keys(2)).ok());
  EXPECT_FALSE(r.Complete({1, 2, 3}));
  EXPECT_TRUE(r.Complete({1, 2}));  // 3 died
  ASSERT_TRUE(r.CloseAdvertise().ok());
  EXPECT_EQ(r.AdvertiseAnswer(1).keys_size(), 1);
  proto::SecAggShare* s = share.add_shares();
  s->set_from(1);
  s->set_to(3);  // not a neighbour (3 never advertised)
  s->set_sealed("x");
  EXPECT_EQ(r.Share(1, share).code(), StatusCode::kMalformed);
  s->set_to(2);
  s->set_from(2);  // 2's share sent by 1
  EXPECT_EQ(r.Share(1, share).code(), StatusCode::kMalformed);
  s->set_from(1);
  EXPECT_TRUE(r.Share(1, share).ok());
  proto::SecAgg reveal;
  reveal.set_phase(proto::SecAgg::UNMASK);
  EXPECT_EQ(r.Reveal(1, reveal).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(ParseSecureAggregation("secagg+:dropout=2").ok());
  EXPECT_FALSE(ParseSecureAggregation("paillier").ok());
  EXPECT_FALSE(ValidateFedRoundsOptions({.concurrency = 2, .secure_aggregation = "secagg+"}).ok())
      << "FedBuff's cohorts need K";
  EXPECT_TRUE(ValidateFedRoundsOptions(
                  {.clients_per_round = 2, .concurrency = 4, .secure_aggregation = "secagg+"})
                  .ok());
  EXPECT_FALSE(ValidateFedRoundsOptions({.clients_per_round = 3,
                                         .overcommit = 2,
                                         .concurrency = 4,
                                         .secure_aggregation = "secagg+"})
                   .ok())
      << "a cohort of 6 in 4 slots";
  EXPECT_FALSE(
      ValidateFedRoundsOptions(
          {.clients_per_round = 2, .concurrency = 4, .quorum = 2, .secure_aggregation = "secagg+"})
          .ok());
  EXPECT_FALSE(
      ValidateFedRoundsOptions({.dp = "central:clip=1,noise=1", .secure_aggregation = "secagg+"})
          .ok());
  EXPECT_FALSE(ValidateFedRoundsOptions({.dp = "distributed:clip=1,noise=1"}).ok());
  EXPECT_TRUE(ValidateFedRoundsOptions(
                  {.dp = "distributed:clip=1,noise=1", .secure_aggregation = "secagg+"})
                  .ok());
  // Under virtual time a secure round over-commits too (its late holders' reports are taken out
  // of virtual order for their shares).
  EXPECT_TRUE(ValidateFedRoundsOptions(
                  {.overcommit = 2, .virtual_time = true, .secure_aggregation = "secagg+"})
                  .ok());
}

// The clients' side: a share sealed for another round (a replay) or by someone else is refused,
// and no client reveals both secrets of one neighbour, or reveals when too few are kept.
TEST(SecureRoundTest, AClientRefusesReplayedSharesAndNeverRevealsBothSecrets) {
  SecureCluster c(3, "secagg+");
  c.Run({});
  ASSERT_TRUE(c.close().has_value());

  // Client 1 of a scripted round 1 with neighbours 2 and 3, whose shares come from `sealer`.
  auto script = [](int64_t share_round, std::vector<proto::SecAgg>* sent) {
    const secagg::KeyPair k2 = secagg::NewKeyPair(), k3 = secagg::NewKeyPair();
    return [=](const proto::SecAgg& request) mutable -> StatusOr<proto::SecAgg> {
      sent->push_back(request);
      proto::SecAgg a;
      a.set_round(1);
      if (request.phase() == proto::SecAgg::ADVERTISE) {
        a.set_bits(16);
        a.set_threshold(2);
        for (auto [id, k] : {std::pair{2, k2}, std::pair{3, k3}}) {
          proto::SecAggKeys* keys = a.add_keys();
          keys->set_worker(id);
          keys->set_cipher_pk(std::string(k.pk.begin(), k.pk.end()));
          keys->set_mask_pk(std::string(k.pk.begin(), k.pk.end()));
        }
        return a;
      }
      if (request.phase() == proto::SecAgg::SHARE) {
        const secagg::Key pk1 = *secagg::KeyFrom(sent->front().keys(0).cipher_pk(), "key");
        for (auto [id, k] : {std::pair{2, k2}, std::pair{3, k3}}) {
          proto::SecAggSharePlain p;
          p.set_from(id);
          p.set_to(1);
          p.set_round(share_round);
          p.set_self_share(std::string(32, 's'));
          p.set_key_share(std::string(32, 'k'));
          proto::SecAggShare* s = a.add_shares();
          s->set_from(id);
          s->set_to(1);
          s->set_sealed(*secagg::Seal(p.SerializeAsString(), pk1, k.sk));
        }
      }
      return a;
    };
  };
  proto::SecAgg task;
  task.set_round(1);
  task.set_clip(8);
  std::vector<proto::SecAgg> sent;
  SecureUpload replayed(1, script(0, &sent));
  EXPECT_EQ(replayed.Setup(task, 1).code(), StatusCode::kMalformed);  // sealed for round 0

  std::vector<proto::SecAgg> sent2;
  SecureUpload client(1, script(1, &sent2));
  ASSERT_TRUE(client.Setup(task, 1).ok());
  proto::SecAgg both;
  both.set_phase(proto::SecAgg::UNMASK);
  both.set_round(1);
  both.set_kept(2);
  both.add_survivors(2);
  both.add_dropped(2);
  EXPECT_EQ(client.Unmask(both, true).code(), StatusCode::kPermissionDenied);
  proto::SecAgg few;
  few.set_phase(proto::SecAgg::UNMASK);
  few.set_round(1);
  few.set_kept(1);  // the sum of one upload
  few.add_dropped(2);
  few.add_dropped(3);
  EXPECT_EQ(client.Unmask(few, true).code(), StatusCode::kPermissionDenied);
  proto::SecAgg first;
  first.set_phase(proto::SecAgg::UNMASK);
  first.set_round(1);
  first.set_kept(2);
  first.add_survivors(2);
  first.add_dropped(3);
  ASSERT_TRUE(client.Unmask(first, true).ok());
  EXPECT_EQ(sent2.back().reveals_size(), 3);  // its own self-mask share, 2's and 3's
  proto::SecAgg other = first;                // the same round again, 3 now said to be kept
  other.clear_dropped();
  other.add_survivors(3);
  EXPECT_EQ(client.Unmask(other, true).code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace hetps
