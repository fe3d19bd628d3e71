// FedRounds: the scheduler's side of synchronous federated rounds with client sampling (FedAvg,
// McMahan et al. 2017; over-commitment and a round deadline as in FedScale). Servers run the
// consistency "selected" (server/consistency/selected.cc); edge clients ask for work
// (Client::AwaitRound) and report their uploads (Client::FinishRound).
//
// A round opens once enough clients are idle (checked in and waiting): ceil(K * overcommit)
// of the selected, or every live client when fewer are alive; the first round waits for every
// live client (at most the deadline, when there is one, after the first check-in), so that the
// draw depends on the seed and not on start-up order. The selection policy
// (scheduler/selection/) picks that many; each is answered with the round and trains for it.
// The round closes at the K-th upload (K = --clients_per_round; 0: every selected client),
// when its deadline passed (with what arrived), or when every selected client uploaded or
// died. Closing sends ROUND_CLOSE (the round and the clients kept: the first K uploads) to
// every live server; once all answered, the next round may open, so a client selected for it
// pulls a model with the closed round applied. Uploads after the close are answered "not kept"
// and the servers drop them. After `rounds` rounds (0: no limit) every check-in is answered
// "finished".
//
// The rounds log (a CSV, when a path is given) has one row per aggregation applied on every
// server: aggregation (1, 2, ...: the count evaluators wait for), wall_s (seconds since the first
// round opened or task was granted), kept and dropped (uploads the aggregation used; uploads
// asked for and not used since the previous row: a round's missing or late clients, tasks
// given up), staleness_mean and staleness_max (per kept upload, the aggregations applied between
// its client's pull and this one; 0 in rounds), bytes_up and bytes_down (payload every client
// reported pushing and pulling so far, dropped uploads included), test_loss and test_accuracy
// (an evaluator's measurement after this aggregation, else empty), kept_ranks and dropped_ranks
// (space-separated, in arrival and drop order), late (kept uploads reported after their own
// round closed, --late_rounds: each was among an earlier row's dropped). A row is held back
// while an evaluator may still report its measurement for it.
//
// Asynchronous mode (concurrency C > 0; servers run the consistency "committed"): there are no
// rounds. Whenever fewer than C tasks are open (a committed upload holds its slot until every
// server applied it) and a client is idle, the policy picks one
// idle client and it gets the next task number (the first task waits for every live client to
// be idle, as the first round does). A client that reports its upload of its task has it
// committed: ROUND_CLOSE(task, {client}) to every server, which hand the upload to the
// aggregator as on arrival (fedasync, fedbuff). A task whose client died, left, checked in
// again without reporting it, or passed the deadline is given up: ROUND_CLOSE(task, {}) drops
// it on every server. With quorum K > 1 (FedSA) or a ratio policy (AAFL), commits gather into
// groups of K (or of the policy's share of the C clients, chosen when a group starts) sent as
// one ROUND_CLOSE(workers, tasks), which the servers apply as one step; a group also closes at
// the deadline. Under secure aggregation tasks are granted in cohorts instead, one secure round
// each (fed_rounds_cohorts.cc). `rounds` counts aggregations here (single commits, groups or
// cohorts); "rounds closed" (the evaluator's watch, finished()) counts aggregations applied on
// every server.
//
// An evaluator (a worker that measures the global model and does not train) watches: Watch
// answers once n rounds are closed and applied everywhere (or the run is done). Workers that
// watched are evaluators: they are not counted among the live clients a round waits for.
//
// Thread-safety: none; owned by the scheduler's loop thread. Time is passed in.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "durable.pb.h"
#include "hetps.pb.h"
#include "scheduler/barrier.h"
#include "scheduler/fed_privacy.h"
#include "scheduler/fed_rounds_log.h"
#include "scheduler/ratio/ratio.h"
#include "scheduler/secure_round.h"
#include "scheduler/selection/selection.h"

namespace hetps {

struct FedRoundsOptions {
  int clients_per_round = 0;  // K: uploads a round keeps; 0: every selected client's
  double overcommit = 1.0;    // clients selected: ceil(K * overcommit)
  double deadline_s = 0;      // a round closes (async: a task is given up) this long after it
                              // opened (0: no deadline)
  int64_t rounds = 0;         // rounds to run (0: no limit)
  std::string selection = "random";
  uint64_t seed = 1;
  std::string csv_path;  // rounds.csv (empty: none); clients.csv goes beside it
  int concurrency = 0;   // > 0: asynchronous mode, at most this many clients train at once
  // Asynchronous mode: uploads per aggregation. 1: each on its own (FedAsync, FedBuff); K > 1:
  // groups of K, each one step on the servers (FedSA); 0: K chosen from the clients' training
  // times (common/quorum.h), at most `concurrency`.
  int quorum = 1;
  // Asynchronous mode, AAFL: an aggregation-ratio policy (scheduler/ratio/ratio.h) choosing,
  // before each aggregation, the share alpha of the `concurrency` clients whose earliest
  // uploads it takes; empty: `quorum` decides.
  std::string ratio;
  // Synchronous rounds: an upload reported after its round closed is still used by the next
  // close if it is at most this many rounds late, weighted by (its round + 1) / (the closing
  // round + 1) within that close's step (FedLesScan's tolerance, ALGORITHMS.md §7); 0: late
  // uploads are dropped. An accepted upload is answered "kept" and applied by the next close
  // (none is accepted when no round is left to close).
  int64_t late_rounds = 0;
  // Every `now` passed in is virtual time (--clock=virtual, scheduler/virtual_clock.h).
  bool virtual_time = false;
  // --dp (common/privacy.h): the accountant reports the epsilon spent (scheduler/fed_privacy.h);
  // central DP's noise is added by rounds (dp_fedavg), so asynchronous mode refuses it.
  std::string dp = "none";
  // --secure_aggregation (scheduler/secure_round.h): "off" or secagg+[:params]; synchronous
  // rounds, or with `concurrency` FedBuff's cohorts (fed_rounds_cohorts.cc: clients_per_round
  // uploads each, ceil(K x overcommit) clients granted together).
  std::string secure_aggregation = "off";
};

class FedRounds {
 public:
  struct Actions {
    std::function<void(const Arrival&, const proto::FedRound&)> answer_checkin;  // ROUND_TASK
    std::function<void(const Arrival&, const proto::FedRound&)> answer_upload;
    std::function<void(const Arrival&, const proto::FedRound&)> answer_watch;  // ROUND_WATCH
    std::function<void(const proto::FedRound&)> close;  // ROUND_CLOSE to every live server
    std::function<std::vector<int32_t>()> live_servers;
    std::function<int(int32_t)> rank_of;  // a worker's rank, for the CSV
    std::function<void(const Arrival&, const proto::SecAgg&)> answer_secagg;  // SECAGG
    std::function<void(const Arrival&, const Status&)> refuse;                // ERROR
  };
  // REQUIRES: options.selection parses (ValidateFedRoundsOptions).
  FedRounds(const FedRoundsOptions& options, Actions actions);
  ~FedRounds();
  FedRounds(const FedRounds&) = delete;
  FedRounds& operator=(const FedRounds&) = delete;

  // What client `id`'s round request (ROUND_CHECKIN, ROUND_UPLOADED) reports: the payload
  // bytes it pushed and pulled since its previous request and its emulated device and link.
  // Called before CheckIn or Uploaded.
  void Report(int32_t id, const proto::FedRound& request);
  // Evaluator `id` measured the global model after `e.round()` aggregations (its ROUND_WATCH
  // request carried it); goes on that aggregation's row. Called before Watch.
  void Measured(int32_t id, const proto::Evaluation& e);
  // Client `a.worker` is idle and waits to be selected. `live_workers` counts the live workers
  // (clients and evaluators) in every call below.
  void CheckIn(Arrival a, int live_workers, double now);
  // Client `a.worker`'s step of a secure round (SECAGG; fed_rounds_secure.cc): answered when its
  // phase completes, or refused with the reason.
  void Secure(Arrival a, const proto::SecAgg& request, double now);
  // Client `a.worker` finished its pushes of `round`.
  void Uploaded(Arrival a, int64_t round, int live_workers, double now);
  // Server `server` applied the closing round `round`.
  void OnClosed(int32_t server, int64_t round, int live_workers, double now);
  // Evaluator `a.worker` waits until `rounds` rounds are closed and applied.
  void Watch(Arrival a, int64_t rounds, int live_workers, double now);
  // A client (or evaluator) died or left; a server died.
  void RemoveClient(int32_t id, int live_workers, double now);
  void RemoveServer(int32_t id, int live_workers, double now);
  // Deadlines; opens a round that became possible.
  void Tick(int live_workers, double now);

  // Durability (a scheduler with --data_dir keeps this state, written before the answers and
  // closes of the changes it holds go out; scheduler/scheduler_store.h). Save: the state now;
  // times are kept as ages, so a deadline does not run while the scheduler is down, but the
  // rounds log's wall times include that time.
  proto::FedRoundsState Save(double now) const;
  // Continues from `state` (Save's, by a scheduler before its restart), before anything else
  // happened to this object. Refuses a state of the other mode (rounds vs. asynchronous). The
  // rounds log is appended to, without the rows it already holds.
  Status Restore(const proto::FedRoundsState& state, double now);
  // After Restore: asks the live servers again what they may not have answered or received (the
  // closing round, the committed groups not yet applied everywhere, recent drops); the servers
  // apply each at most once.
  void Resume(double now);
  // Whether `a` is a request already answered (a client sends what was not answered to it again
  // to a restarted scheduler, and the answer may have been lost with the old one): then the
  // same answer goes out again and nothing else happens (its report is not counted twice).
  bool Resent(const Arrival& a);

  int64_t round() const { return round_; }  // the open (or next) round
  // What /api/status shows as "federated" (JSON text; empty before any client checked in):
  // mode, rounds (aggregations) applied of the run's, clients by state (idle: waiting to be
  // picked, training: selected or holding a task, uploaded: its upload waits for the round or
  // for the servers, away: alive but not checked in, offline or abandoned, left: gone), per
  // rank {state, selected, kept, missed}, the uploads kept and dropped, bytes up and down, and
  // the evaluators' measurements [aggregation, wall_s, accuracy, bytes_up] (the latest 500).
  std::string SummaryJson() const;
  const FedPrivacy& privacy() const { return privacy_; }
  // Writes one row per client (rank, state, its emulated device slowdown and link, selected,
  // kept, missed, bytes up and down, mean round trip: selection to upload report) to `path`
  // (hetps launch: <run>/clients.csv); done when the run's rounds end.
  void WriteClients(const std::string& path) const;
  bool finished() const { return options_.rounds > 0 && round_ >= options_.rounds; }
  // Virtual time (scheduler/virtual_clock.h): the earliest time at which Tick would act (a
  // round's, group's or task's deadline, the end of the first round's wait: every deadline check
  // compares now with opened + deadline_s, this very value, so a tick at it acts), if any; and
  // whether a close or commit waits for the servers (nothing else may happen meanwhile, so that
  // what comes next sees the model it applied).
  std::optional<double> NextDeadline() const;
  // A client checked in again: if it holds shares of a secure round being unmasked, it never
  // reported (it failed or went offline) and reveals nothing, so the unmasking waits for it no
  // more; one back while its round is open gave its task up, and the unmasking will not wait
  // for it either. Under virtual time its check-in is held, yet this is told at once: which
  // shares rebuild a secret does not change the sum.
  void HolderBack(int32_t worker, double now);
  // Virtual time: whether `worker`'s upload report of `round` belongs to a holder of the secure
  // round being unmasked. Such a report is taken out of virtual order (SchedulerLoop): the
  // unmasking of an over-committed round needs the late holders' shares, and their reports wait
  // behind it; what a late holder reveals depends only on which uploads the round kept.
  bool UnmaskHolder(int32_t worker, int64_t round) const;
  bool AwaitingServers() const;
  const std::map<int32_t, ClientRecord>& clients() const { return clients_; }

 private:
  enum class State { kWaiting, kOpen, kClosing };
  struct SecureCohort;
  // Save's and Restore's parts (fed_rounds_state.cc); `at` maps a saved time onto this run's.
  void SaveClients(proto::FedRoundsState& s) const;
  void SaveTasks(proto::FedRoundsState& s) const;
  void RestoreClient(const proto::FedClientState& p, double selected_at);
  void RestoreTasks(const proto::FedRoundsState& s, const std::function<double(double)>& at);
  // Every answer goes through these: the last one per client is kept for Resent.
  void AnswerCheckin(const Arrival& a, const proto::FedRound& r);
  void AnswerUpload(const Arrival& a, const proto::FedRound& r);
  // Synchronous rounds (fed_rounds_sync.cc).
  void MaybeOpen(int live_workers, double now);
  void Assign(std::map<int32_t, Arrival>::iterator it, int64_t round, const proto::FedRound& task,
              double now);
  void UploadedSync(const Arrival& a, int64_t round, bool in_time, ClientRecord& c);
  void MaybeClose(int live_workers, double now);
  void Close(int live_workers, double now);
  void SendClose(int live_workers, double now);  // closing_ to every live server
  // Secure rounds (fed_rounds_secure.cc): a phase that completed answers its held requests;
  // closing starts the unmasking, whose end sends the close (or, when the round cannot be
  // unmasked, a close that applies nothing). `c` is secure_ or one of cohorts_.
  SecureCohort* CohortOf(int64_t round);
  const SecureCohort* CohortOf(int64_t round) const;
  const std::set<int32_t>& Members(const SecureCohort& c) const {
    return async() ? c.members : selected_;
  }
  void MaybeAdvanceSecure(double now);
  void MaybeAdvanceSecure(SecureCohort& c, double now);
  Status BeginUnmasking(SecureCohort& c, const std::vector<int32_t>& kept, double now);
  void CloseSecure(int live_workers, double now);
  void FinishSecure(SecureCohort& c, double now);
  void AbortSecure(SecureCohort& c, const Status& why, double now);
  void ReleaseAborted(SecureCohort& c, const std::vector<int32_t>& counted, const Status& why);
  // FedBuff's cohorts under secure aggregation (fed_rounds_cohorts.cc): granted together, one
  // task number each, their first K uploads one secure round and one server step.
  void MaybeGrantCohorts(int live_workers, double now);
  void UploadedCohort(const Arrival& a, int64_t task, ClientRecord& c, double now);
  void LeaveCohort(int32_t worker, int64_t task, const char* why, double now);
  void MaybeCloseCohort(SecureCohort& c, double now);
  void FinishCohort(SecureCohort& c, proto::SecureClose unmask, double now);
  void AbortCohort(SecureCohort& c, const Status& why, double now);
  void DropClock(int64_t task);  // ROUND_CLOSE(task, {}): the servers drop what it holds
  // Adaptive clipping (fed_rounds_clip.cc): what a round's task tells its clients, a client's
  // report, and the step of the clip when the round closes (under distributed DP, when its
  // secure round was unmasked: from the sum of the masked words).
  void ClipTask(proto::FedRound& task) const;
  void TakeClipReport(int32_t id, const proto::FedRound& request);
  void StepClip(proto::FedRound& close);
  void StepClipSecure(int64_t round, const proto::SecureClose& unmask);
  void FinishEveryone();
  void AnswerWatchers();
  // Asynchronous mode (fed_rounds_async.cc).
  void OnAppliedAsync(int32_t server, int64_t task, int live_workers, double now);
  void TickAsync(int live_workers, double now);
  struct Task {
    int64_t id = 0;
    double opened = 0;
    int64_t base = 0;  // aggregations applied when it was granted
  };
  struct Upload {  // a committed upload on its way into an aggregation
    int32_t worker = 0;
    int64_t task = 0;
    int64_t base = 0;
  };
  bool async() const { return options_.concurrency > 0; }
  void MaybeGrant(int live_workers, double now);
  void UploadedAsync(const Arrival& a, int64_t task, ClientRecord& c, double now);
  void Commit(int32_t worker, const Task& task, double now);
  int Quorum(int live_workers) const;
  // Per measured client (only those holding a task or in the open group: in_flight_only), the
  // EMA (0.5) of its training times.
  std::vector<double> TrainTimeEmas(bool in_flight_only) const;
  void MaybeCloseGroup(double now, int live_workers);
  void GiveUp(int32_t worker, const Task& task, const char* why, double now);
  // An aggregation of `kept` (with the aggregations applied when each pulled) is applied on
  // every server: counts it, logs its row and answers the evaluators waiting for it.
  // `late`: how many of `kept` (the last ones) came after their own round closed.
  void Applied(const std::vector<int32_t>& kept, const std::vector<int64_t>& bases, double now,
               size_t late = 0);
  void ApplyGroup(const std::vector<Upload>& uploads, double now);  // asynchronous mode
  void Dropped(int32_t worker);
  // The first round (or task) waits for every live client, but no longer than the deadline
  // after the first check-in (clients that start offline would hold it up).
  bool WaitedLongEnough(double now) const {
    return options_.deadline_s > 0 && first_checkin_ >= 0 &&
           now >= first_checkin_ + options_.deadline_s;
  }
  // Live workers that are clients (not evaluators).
  int Clients(int live_workers) const {
    return live_workers - static_cast<int>(evaluators_.size());
  }

  FedRoundsOptions options_;
  Actions actions_;
  std::unique_ptr<SelectionPolicy> policy_;
  std::mt19937_64 rng_;
  FedRoundsLog log_;
  FedPrivacy privacy_;
  // Adaptive clipping: each client's last report of its bit (central: in the clear; local:
  // centred and noised; distributed: its masked word), and under distributed DP the kept
  // uploads' words while the secure round unmasks.
  struct ClipReport {
    int64_t round = -1;
    std::optional<bool> within;
    std::optional<double> noisy;
    std::optional<uint32_t> masked;
  };
  std::map<int32_t, ClipReport> within_clip_;
  std::optional<std::vector<uint32_t>> count_words_;
  double closed_clip_ = 0;  // the clip of the round closing (its rounds.csv row)
  int round_selected_ = 0, round_population_ = 0;  // the open round's draw (central DP's q)
  double first_checkin_ = -1;                      // when the first client checked in
  State state_ = State::kWaiting;
  int64_t round_ = 0;
  double opened_at_ = 0;
  int keep_ = 0;                                 // K of the open round
  std::map<int32_t, Arrival> idle_;              // checked in, by id
  std::set<int32_t> selected_;                   // of the open round, still alive
  std::vector<int32_t> selected_all_;            // of the open round, as selected
  std::vector<int32_t> uploads_;                 // of the open round, in arrival order
  std::vector<proto::LateUpload> late_;          // accepted late, for the next close
  std::vector<proto::LateUpload> closing_late_;  // those the closing round takes
  std::set<int32_t> closing_servers_;            // yet to answer ROUND_CLOSE
  proto::FedRound closing_;                      // the closing round's ROUND_CLOSE
  std::map<int32_t, ClientRecord> clients_;
  std::set<int32_t> evaluators_;
  std::set<int32_t> left_;  // clients that died or left (and did not check in since)
  const char* StateOf(int32_t id) const;
  std::multimap<int64_t, Arrival> watchers_;  // by the rounds they wait for
  // Asynchronous mode: the open task of each client that holds one, the next task number,
  // uploads committed so far, and the servers yet to apply each commit.
  // A group of committed uploads waits for its quorum; each aggregation sent waits for every
  // server (by the largest task id in it); a client keeps its slot until its upload is applied.
  struct Applying {
    std::set<int32_t> servers;
    std::vector<Upload> uploads;
  };
  std::map<int32_t, Task> tasks_;
  int64_t next_task_ = 0;
  int64_t committed_ = 0;      // uploads committed
  int64_t aggregations_ = 0;   // aggregations sent to the servers
  int64_t unapplied_ = 0;      // committed uploads not yet applied everywhere
  std::vector<Upload> group_;  // waiting for the quorum
  double group_opened_ = 0;
  std::unique_ptr<RatioPolicy> ratio_;  // options.ratio
  int group_quorum_ = 1;                // the ratio policy's K for the open group
  int last_live_workers_ = 0;
  std::map<int64_t, Applying> applying_;
  std::deque<int64_t> recent_drops_;  // the latest tasks given up (sent again on Resume)
  struct Answered {
    uint64_t request = 0;
    proto::MsgType type = proto::ROUND_TASK;
    proto::FedRound answer;
  };
  std::map<int32_t, Answered> answered_;  // per client, its last answered request
  // Secure aggregation: a secure round's protocol and what it holds. Synchronous rounds have one
  // at a time (secure_); FedBuff's cohorts (fed_rounds_cohorts.cc) several side by side
  // (cohorts_, by their task number).
  struct SecureCohort {  // declared above
    std::unique_ptr<SecureRound> protocol;
    // Cohorts: its members still alive that did not report without an upload (a synchronous
    // round's are selected_).
    std::set<int32_t> members;
    // Members that checked in again without reporting: under virtual time a check-in is held,
    // so they stay members until then, yet reveal nothing.
    std::set<int32_t> back;
    std::map<int32_t, Arrival> waiting;  // SECAGG requests held until their phase completes
    std::map<int32_t, Arrival> uploads;  // in-time upload reports held until the unmasking
    std::vector<int32_t> kept;           // cohorts: the in-time uploads, in arrival order
    int keep = 0;                        // cohorts: K, the uploads its step takes
    double phase_at = 0;                 // when its phase began
    int64_t base = 0;                    // cohorts: aggregations applied when granted
  };
  SecureOptions secure_options_;
  std::unique_ptr<SecureCohort> secure_;
  std::map<int64_t, SecureCohort> cohorts_;
  int64_t secure_unmasked_ = 0, secure_aborted_ = 0;  // rounds, for /api/status
};

// What FedRounds refuses: counts below 0, overcommit below 1, an unknown selection policy.
Status ValidateFedRoundsOptions(const FedRoundsOptions& options);

}  // namespace hetps
