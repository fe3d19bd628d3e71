// GroupSum: the open sums of a host-local aggregator (docs/aggregation-tier.md). Each worker of
// the group pushes a partition to it; the pushes of one partition sum into one open sum that
// goes upstream as one push, carrying the workers' numbered pushes it holds (its
// contributions), once
//  - every live worker of the group is in it, or
//  - it waited `wait_s` since it opened: under a synchronous controller (by_clock) the bound on
//    waiting for a slow worker, asynchronously the window of pushes summed at once (iSwitch's
//    asynchronous mode).
// Synchronous sums are per (partition, clock); asynchronous ones per partition, whatever the
// clocks. A worker's second push of a key before its sum went opens the next sum of that key,
// so a sum holds at most one push of each worker and each worker's pushes leave in its order
// (the servers apply a sum only as every worker's next push: server/serving.cc).
//
// Values add in float32 in arrival order: exact whenever the partial sums are (integers below
// 2^24, as the tests push). A sum that leaves early (a dead worker, the wait) is correct: the
// servers add what comes later for the same clock to the same round.
//
// Thread-safety: none; one per aggregator loop.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

class GroupSum {
 public:
  struct Options {
    std::vector<int32_t> group;  // the workers (node ids) that push here
    bool by_clock = true;        // synchronous: one sum per (partition, clock)
    double wait_s = 1.0;         // how long a sum waits for the rest of the group
    size_t max_open = 4096;      // open sums at most; a push beyond is refused
  };
  // One worker's push waiting in a sum for its answer.
  struct Waiter {
    std::string identity;  // its connection
    uint64_t request_id = 0;
    int32_t worker = 0;
    int64_t clock = 0;
  };
  // A sum ready to go upstream.
  struct Sum {
    int32_t partition = 0;
    int32_t rank = 0;          // the server rank it goes to
    int64_t clock = 0;         // the smallest of its pushes' clocks
    int64_t base_version = 0;  // the oldest version its pushes were computed from
    int32_t layer = 0;
    double weight = 0;
    std::optional<double> loss;  // the mean of the losses its pushes reported
    std::vector<float> values;
    std::vector<proto::Contribution> contributions;
    std::vector<Waiter> waiters;
    double opened = 0;
    int losses = 0;
  };

  explicit GroupSum(Options options);

  // Adds worker h.sender()'s push of h.partition() (to server rank h.rank()) with its decoded
  // `values`, arriving at `now` on `identity`. Returns the sums it completed (none, or the one
  // it joined). Refuses (changing nothing) a worker outside the group, an unnumbered push, one
  // whose size differs from its partition's open sum, or one beyond max_open.
  StatusOr<std::vector<Sum>> Add(const proto::Header& h, const std::string& identity,
                                 std::span<const float> values, double now);
  // The sums whose wait ended by `now`.
  std::vector<Sum> Due(double now);
  // Worker `w` is gone (dead, left): no sum waits for it any more. Returns the sums it
  // completed.
  std::vector<Sum> Forget(int32_t w);
  // Every open sum, for an aggregator that stops (its workers push directly).
  std::vector<Sum> TakeAll();
  // Seconds until the first open sum's wait ends (negative: none is open).
  double NextDue(double now) const;

  size_t open() const;
  const std::set<int32_t>& live() const { return live_; }
  const Options& options() const { return options_; }

 private:
  using Key = std::pair<int32_t, int64_t>;  // partition, clock (or 0 asynchronously)
  bool Complete(const Sum& s) const;
  std::vector<Sum> TakeComplete();

  Options options_;
  std::set<int32_t> live_;
  std::map<Key, std::deque<Sum>> open_;
};

}  // namespace hetps
