// FedRounds' durable state: a FedRounds restored from what another saved goes on exactly as the
// one that saved it (the same selections, answers, closes and client histories), in rounds and
// in asynchronous mode, whatever the point of the run it was saved at; what it had asked the
// servers is asked again, and a request answered before the restart gets the same answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "scheduler/fed_rounds.h"
#include "tests/scratch_dir.h"

namespace hetps {
using testing::ScratchDir;
namespace {

// Everything a FedRounds sends, in order, as text.
struct Log {
  std::vector<std::string> out;
  std::vector<int32_t> servers = {100, 101};
  FedRounds::Actions Actions() {
    auto answer = [this](const char* kind) {
      return [this, kind](const Arrival& a, const proto::FedRound& r) {
        out.push_back(std::string(kind) + " " + std::to_string(a.worker) + " #" +
                      std::to_string(a.request_id) + " " + r.ShortDebugString());
      };
    };
    return {
        .answer_checkin = answer("task"),
        .answer_upload = answer("uploaded"),
        .answer_watch = answer("watch"),
        .close =
            [this](const proto::FedRound& r) { out.push_back("close " + r.ShortDebugString()); },
        .live_servers = [this] { return servers; },
        .rank_of = [](int32_t id) { return id - 1; }};
  }
};

// Clients driven by a seeded schedule: each waits to be picked, trains its task, uploads it (or,
// now and then, fails and checks in again without reporting it); servers apply each close
// after a while; time passes. The decisions read only what the run sent, so two FedRounds that
// behave alike get the same schedule.
class Driver {
 public:
  Driver(int clients, uint64_t seed) : clients_(clients), rng_(seed) {
    for (int32_t w = 1; w <= clients; ++w) next_request_[w] = 1;
  }
  Arrival Next(int32_t w) { return {w, next_request_[w]++, "id"}; }

  // One step on `targets` (the same step on each), given what `log` (the first target's) sent.
  void Step(const std::vector<FedRounds*>& targets, const Log& log) {
    Learn(log);
    now_ += 0.25;
    const int live = clients_;
    const int what = static_cast<int>(rng_() % 10);
    if (what < 6 && !tasks_.empty()) {  // a client with a task reports it (or fails)
      auto it = std::next(tasks_.begin(), static_cast<long>(rng_() % tasks_.size()));
      const auto [w, round] = *it;
      tasks_.erase(it);
      const bool fails = rng_() % 6 == 0;
      if (!fails) {
        const Arrival up = Next(w);
        for (FedRounds* f : targets) f->Uploaded(up, round, live, now_);
      }
      waiting_.insert(w);
      const Arrival in = Next(w);
      last_checkin_[w] = in;
      for (FedRounds* f : targets) f->CheckIn(in, live, now_);
    } else if (what < 9 && !closes_.empty()) {  // the servers apply the oldest close
      const int64_t round = closes_.front();
      closes_.erase(closes_.begin());
      for (FedRounds* f : targets) {
        for (int32_t s : log.servers) f->OnClosed(s, round, live, now_);
      }
    } else {
      for (FedRounds* f : targets) f->Tick(live, now_);
    }
  }
  void Start(FedRounds& f) {
    for (int32_t w = 1; w <= clients_; ++w) {
      const Arrival in = Next(w);
      last_checkin_[w] = in;
      waiting_.insert(w);
      f.CheckIn(in, clients_, now_);
    }
  }
  // What a restarted scheduler receives first: every waiting client's check-in, sent again.
  void Resend(FedRounds& f, const Log& log) {
    Learn(log);
    for (int32_t w : waiting_) f.CheckIn(last_checkin_.at(w), clients_, now_);
  }
  double now() const { return now_; }

 private:
  // Tasks handed out and closes sent since the last step.
  void Learn(const Log& log) {
    for (; seen_ < log.out.size(); ++seen_) {
      const std::string& line = log.out[seen_];
      proto::FedRound r;
      if (line.starts_with("task ")) {
        const int32_t w = std::stoi(line.substr(5));
        waiting_.erase(w);
        const size_t at = line.find("round: ");
        const int64_t round = at == std::string::npos ? 0 : std::stoll(line.substr(at + 7));
        if (line.find("finished: true") == std::string::npos) tasks_.push_back({w, round});
      } else if (line.starts_with("close ")) {  // a drop's answer is ignored, as a server's
        const size_t at = line.find("round: ");
        closes_.push_back(at == std::string::npos ? 0 : std::stoll(line.substr(at + 7)));
      }
    }
  }
  int clients_;
  std::mt19937_64 rng_;
  double now_ = 0;
  size_t seen_ = 0;
  std::map<int32_t, uint64_t> next_request_;
  std::map<int32_t, Arrival> last_checkin_;
  std::set<int32_t> waiting_;
  std::vector<std::pair<int32_t, int64_t>> tasks_;
  std::vector<int64_t> closes_;
};

std::vector<std::string> After(const Log& log, size_t from) {
  return {log.out.begin() + static_cast<long>(std::min(from, log.out.size())), log.out.end()};
}

void ExpectSameClients(const FedRounds& a, const FedRounds& b) {
  ASSERT_EQ(a.clients().size(), b.clients().size());
  for (const auto& [id, c] : a.clients()) {
    const ClientRecord& d = b.clients().at(id);
    EXPECT_EQ(c.selected, d.selected) << id;
    EXPECT_EQ(c.kept, d.kept) << id;
    EXPECT_EQ(c.missed, d.missed) << id;
    EXPECT_EQ(c.consecutive_missed, d.consecutive_missed) << id;
    EXPECT_EQ(c.missed_rounds, d.missed_rounds) << id;
    EXPECT_EQ(c.train_s, d.train_s) << id;
  }
}

// Runs `steps_before` steps on one FedRounds, restores a second from its saved state (a
// restarted scheduler), and runs both on the same schedule: from then on they send the same.
void CheckRestore(const FedRoundsOptions& options, int clients, int steps_before, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "saved after " << steps_before << " steps, seed " << seed);
  Log la, lb;
  FedRounds a(options, la.Actions());
  Driver d(clients, seed);
  d.Start(a);
  for (int i = 0; i < steps_before; ++i) d.Step({&a}, la);
  const proto::FedRoundsState saved = a.Save(d.now());
  std::string bytes;
  ASSERT_TRUE(saved.SerializeToString(&bytes));
  proto::FedRoundsState parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  FedRounds b(options, lb.Actions());
  ASSERT_TRUE(b.Restore(parsed, d.now()).ok());
  b.Resume(d.now());
  // What it asks the servers again: the closing round (rounds), the groups not yet applied
  // everywhere (asynchronous); the drops, which change nothing where they were applied.
  for (const std::string& line : lb.out) EXPECT_TRUE(line.starts_with("close ")) << line;
  lb.out.clear();
  d.Resend(b, la);
  for (int i = 0; i < 160; ++i) {
    const size_t b_from = lb.out.size();
    const size_t a_now = la.out.size();
    d.Step({&a, &b}, la);
    ASSERT_EQ(After(la, a_now), After(lb, b_from)) << "step " << i << " after the restore";
  }
  EXPECT_EQ(a.round(), b.round());
  EXPECT_GT(a.round(), 0);
  ExpectSameClients(a, b);
}

TEST(FedRoundsRestoreTest, RestoredRoundsGoOnExactlyAsTheSavedOnes) {
  const FedRoundsOptions options{.clients_per_round = 3,
                                 .overcommit = 1.5,
                                 .deadline_s = 2,
                                 .rounds = 0,
                                 .selection = "fedlesscan",
                                 .seed = 4,
                                 .late_rounds = 1};
  for (int steps : {0, 1, 5, 17, 40, 81}) CheckRestore(options, 8, steps, 11 + steps);
}

TEST(FedRoundsRestoreTest, RestoredAsynchronousUploadsGoOnExactlyAsTheSavedOnes) {
  FedRoundsOptions options{.deadline_s = 3, .concurrency = 3, .quorum = 2};
  options.seed = 5;
  for (int steps : {0, 2, 9, 30, 77}) CheckRestore(options, 7, steps, 21 + steps);
  options.quorum = 1;
  for (int steps : {3, 50}) CheckRestore(options, 7, steps, 31 + steps);
}

TEST(FedRoundsRestoreTest, AClosingRoundIsAskedAgainAndItsAnswersCompleteIt) {
  Log log;
  FedRounds a({.clients_per_round = 1, .rounds = 3}, log.Actions());
  a.CheckIn({1, 1, "id"}, 2, 0);
  a.CheckIn({2, 1, "id"}, 2, 0);
  ASSERT_EQ(log.out.size(), 1u);
  const int32_t picked = log.out[0].starts_with("task 1") ? 1 : 2;
  a.Uploaded({picked, 2, "id"}, 0, 2, 1);
  ASSERT_TRUE(log.out.back().starts_with("close ")) << log.out.back();
  a.OnClosed(100, 0, 2, 1);  // server 101's answer is lost with the scheduler
  Log restored_log;
  FedRounds b({.clients_per_round = 1, .rounds = 3}, restored_log.Actions());
  ASSERT_TRUE(b.Restore(a.Save(1), 5).ok());
  b.Resume(5);
  ASSERT_EQ(restored_log.out.size(), 1u);
  EXPECT_EQ(restored_log.out[0], log.out.back()) << "the same close, asked again";
  b.CheckIn({3 - picked, 1, "id"}, 2, 5);  // the idle client asks again
  b.CheckIn({picked, 3, "id"}, 2, 5);
  b.OnClosed(100, 0, 2, 6);
  EXPECT_EQ(b.round(), 0) << "server 101 has not answered the close asked again";
  b.OnClosed(101, 0, 2, 6);
  EXPECT_EQ(b.round(), 1);
  EXPECT_TRUE(restored_log.out.back().starts_with("task ")) << "round 1 opened";
}

TEST(FedRoundsRestoreTest, ARequestAnsweredBeforeTheRestartGetsTheSameAnswerAgain) {
  Log log;
  FedRounds a({.clients_per_round = 1, .rounds = 3}, log.Actions());
  proto::FedRound report;
  report.set_bytes_up(1000);
  a.Report(1, report);
  a.CheckIn({1, 7, "id"}, 1, 0);
  ASSERT_EQ(log.out.size(), 1u);
  const std::string task = log.out[0];
  Log restored_log;
  FedRounds b({.clients_per_round = 1, .rounds = 3}, restored_log.Actions());
  ASSERT_TRUE(b.Restore(a.Save(0), 0).ok());
  // The answer was lost with the old scheduler: the client asks again, under the same id.
  EXPECT_TRUE(b.Resent({1, 7, "id"}));
  ASSERT_EQ(restored_log.out.size(), 1u);
  EXPECT_EQ(restored_log.out[0], task);
  EXPECT_FALSE(b.Resent({1, 8, "id"})) << "a new request";
  EXPECT_EQ(b.clients().at(1).bytes_up, 1000) << "the report counted once";
  EXPECT_EQ(b.clients().at(1).selected, 1);
}

TEST(FedRoundsRestoreTest, ARestoreInTheOtherModeIsRefused) {
  Log log;
  FedRounds rounds({.clients_per_round = 1}, log.Actions());
  FedRounds async({.concurrency = 2}, log.Actions());
  EXPECT_TRUE(async.Restore(rounds.Save(0), 0).ok()) << "nothing federated happened yet";
  rounds.CheckIn({1, 1, "id"}, 2, 0);
  FedRounds async2({.concurrency = 2}, log.Actions());
  EXPECT_FALSE(async2.Restore(rounds.Save(0), 0).ok());
  proto::FedRoundsState bad = rounds.Save(0);
  bad.set_rng("not a generator");
  FedRounds other({.clients_per_round = 1}, log.Actions());
  EXPECT_FALSE(other.Restore(bad, 0).ok());
}

// The rounds log goes on in the same file: the rows the previous scheduler wrote stay, none is
// written twice (a row applied again after the restart has the same aggregation).
TEST(FedRoundsRestoreTest, TheRoundsLogGoesOnWithoutRepeatingARow) {
  ScratchDir dir("fed_restore");
  std::filesystem::create_directories(dir.path());
  const std::string csv = (dir.path() / "rounds.csv").string();
  const FedRoundsOptions options{.clients_per_round = 1, .rounds = 4, .csv_path = csv};
  // One client: it uploads round r (request 100 + r), the servers apply it, it checks in again.
  auto round = [](FedRounds& f, int64_t r, double now) {
    f.Uploaded({1, static_cast<uint64_t>(100 + r), "id"}, r, 1, now);
    f.OnClosed(100, r, 1, now);
    f.OnClosed(101, r, 1, now);
    f.CheckIn({1, static_cast<uint64_t>(200 + r), "id"}, 1, now);
  };
  Log la;
  auto a = std::make_unique<FedRounds>(options, la.Actions());
  a->CheckIn({1, 1, "id"}, 1, 0);
  round(*a, 0, 1);
  const proto::FedRoundsState saved = a->Save(1.5);
  // Round 1 is applied and logged, and the scheduler dies before saving that (so its answer to
  // the upload never left: the client sends it again).
  round(*a, 1, 2);
  a.reset();
  Log lb;
  FedRounds b(options, lb.Actions());
  ASSERT_TRUE(b.Restore(saved, 3).ok());
  for (int64_t r = 1; r < 4; ++r) round(b, r, 3.0 + r);
  std::ifstream in(csv);
  std::vector<std::string> firsts;
  for (std::string line; std::getline(in, line);) firsts.push_back(line.substr(0, line.find(',')));
  EXPECT_EQ(firsts, (std::vector<std::string>{"aggregation", "1", "2", "3", "4"}));
}

}  // namespace
}  // namespace hetps
