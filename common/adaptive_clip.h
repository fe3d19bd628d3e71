// Adaptive clipping for central DP (Andrew et al., "Differentially Private Learning with
// Adaptive Clipping", NeurIPS'21; --dp=central:clip=C,noise=Z,quantile=Q): the clip norm S
// follows the Q-quantile of the clients' update norms instead of staying at C.
//
// Round t clips at S_t (the scheduler sends it with the task). Each kept client reports one bit,
// b_i = [its update's norm before clipping <= S_t]; the scheduler adds N(0, sigma_b^2) to their
// count and steps geometrically:
//   b_t = (sum_i b_i + N(0, sigma_b^2)) / m,   S_{t+1} = S_t exp(-lr (b_t - Q))
// m being the round's kept uploads. The count's noise is paid for out of the updates' noise: with
// the run's noise multiplier Z the round's sum gets std z_u S_t with
//   z_u = (Z^-2 - (2 sigma_b)^-2)^(-1/2)
// so that the two Gaussian mechanisms together cost what one with multiplier Z costs (the paper's
// Theorem 1); the accountant keeps counting Z. sigma_b defaults to max(m/20, Z) for the round's
// expected m: the paper's m/20, raised for small rounds, where it would leave no budget for the
// updates (z_u is then at most 2/sqrt(3) Z, 15% more update noise).
//
// The count's noise of round t is drawn from (seed, t): a restarted scheduler repeats it.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace hetps {

class AdaptiveClip {
 public:
  struct Options {
    double initial = 1;      // S_0: --dp's clip
    double quantile = 0.5;   // Q in (0, 1)
    double lr = 0.2;         // the geometric step's rate
    double noise = 1;        // Z, the run's noise multiplier
    double count_noise = 0;  // sigma_b; 0: max(expected_kept / 20, Z)
    int expected_kept = 1;   // m's expected value (the round's K)
    uint64_t seed = 1;
  };
  // INVALID_ARGUMENT when sigma_b leaves the updates no budget (2 sigma_b <= Z).
  static StatusOr<AdaptiveClip> Make(const Options& o);

  double clip() const { return clip_; }                  // S_t
  double update_noise() const { return update_noise_; }  // z_u
  double count_noise() const { return count_noise_; }    // sigma_b
  // The round's sum's noise std: z_u S_t.
  double noise_std() const { return update_noise_ * clip_; }
  // Round `round` closed with `within` of its `kept` uploads within clip(): steps S. The noisy
  // fraction it used is returned.
  double EndRound(int64_t round, int64_t within, int64_t kept);

  // Durability: S_t is the whole state.
  void Restore(double clip) { clip_ = clip; }

 private:
  AdaptiveClip() = default;
  Options o_;
  double clip_ = 1, update_noise_ = 1, count_noise_ = 1;
};

}  // namespace hetps
