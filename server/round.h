// RoundSpec: which held updates a synchronous consistency controller's closed round applies to
// a partition, and how they combine. Produced by the controller (network thread), applied by
// every partition owner (PartitionState::ApplyRound).
//   bsp        every worker, each clock <= clock one step, summed (fedavg: weighted mean)
//   backup     the named workers at exactly `clock`, their mean; everything older is dropped
//   semi_async the named workers' held updates whatever their clocks, one step weighted by
//              samples * (1 + staleness)^-a; other workers' holdings wait for a later round
//   committed  (per_push) the named workers' updates of exactly `clock` go to the aggregator
//              one by one, as if they arrived now; the rest of that clock is dropped (an empty
//              list drops it all); other clocks are untouched
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

namespace hetps {

namespace proto {
class SecureClose;
}

struct RoundSpec {
  enum class Combine { kSum, kMean, kWeighted };
  int64_t clock = 0;             // held updates of clocks <= this
  std::vector<int32_t> workers;  // whose updates count; empty: everyone's
  bool only_clock = false;       // only `clock` itself counts; the rest up to it is dropped
  bool one_step = false;         // all counted updates form one step (else one per clock)
  Combine combine = Combine::kSum;
  double staleness_exponent = 0;  // kWeighted: weight = samples * (1 + sigma)^-a
  bool per_push = false;          // committed uploads through the aggregator (see above)
  // Uploads of earlier clocks that join this round (FedLesScan's late results), each with its
  // weight times `factor`; they are part of the round's step, not steps of their own clocks.
  struct Late {
    int32_t worker = 0;
    int64_t clock = 0;
    double factor = 1;
  };
  std::vector<Late> late;
  // With only_clock: uploads of clocks >= keep_from that this round does not use wait (a later
  // round may take them late) instead of being dropped.
  int64_t keep_from = std::numeric_limits<int64_t>::max();
  // A secure round (--secure_aggregation): the kept uploads of `clock` are masked fixed-point
  // words; their sum less these masks is the weighted sum of the updates, applied as one step
  // on their weighted mean times the mean of their (1 + staleness)^-staleness_exponent
  // (PartitionState::ApplySecure). Every earlier clock is dropped, or with per_push (a
  // committed cohort) only `clock`. Null: a plain round.
  std::shared_ptr<const proto::SecureClose> secure;
  // Central DP's adaptive clipping: the std of the noise dp_fedavg adds to the round's sum
  // (PartitionState::round_noise_std); negative: the aggregator spec's.
  double noise_std = -1;

  // The round a policy switch applies so nothing held is lost: every clock, everyone.
  static RoundSpec Flush() {
    RoundSpec r;
    r.clock = std::numeric_limits<int64_t>::max();
    return r;
  }
  bool IsFlush() const { return clock == std::numeric_limits<int64_t>::max() && workers.empty(); }
};

}  // namespace hetps
