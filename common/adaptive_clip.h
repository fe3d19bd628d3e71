// Adaptive clipping (Andrew et al., "Differentially Private Learning with Adaptive Clipping",
// NeurIPS'21; --dp=MODE:clip=C,noise=Z,quantile=Q): the clip norm S follows the Q-quantile of
// the clients' update norms instead of staying at C.
//
// Round t clips at S_t (the scheduler sends it with the task). Each kept client has one bit,
// b_i = [its update's norm before clipping <= S_t]; the noisy count of the bits steps S
// geometrically:
//   b_t = (sum_i b_i + N(0, sigma_b^2)) / m,   S_{t+1} = S_t exp(-lr (b_t - Q))
// m being the round's kept uploads. Who adds the count's noise is the mode's:
//   central      the clients report their bits; the scheduler adds N(0, sigma_b^2) (EndRound)
//   distributed  each client adds N(0, sigma_b^2 / K) to its centred bit (b_i - 1/2) and sums it
//                under the secure round's masks; the scheduler unmasks only the sum (Step)
//   local        each client adds N(0, sigma_b^2) to its centred bit and reports it in the clear
//                (sigma_b is then each client's: the sum carries m sigma_b^2)
// The bit's noise is paid for out of the updates' noise: with the run's noise multiplier Z the
// updates get multiplier
//   z_u = (Z^-2 - (2 sigma_b)^-2)^(-1/2)
// (on the round's sum under central and distributed DP, on each update under local DP) so that
// the two Gaussian mechanisms together (the centred bit's sensitivity is 1/2) cost what one with
// multiplier Z costs (the paper's Theorem 1); the accountant keeps counting Z. sigma_b defaults
// to max(m/20, Z) for the round's expected m (the paper's m/20, raised for small rounds, where
// it would leave no budget for the updates: z_u is then at most 2/sqrt(3) Z, 15% more update
// noise), and to Z under local DP.
//
// The count's noise of round t is drawn from (seed, t): a restarted scheduler repeats it.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace hetps {

class AdaptiveClip {
 public:
  struct Options {
    double initial = 1;       // S_0: --dp's clip
    double quantile = 0.5;    // Q in (0, 1)
    double lr = 0.2;          // the geometric step's rate
    double noise = 1;         // Z, the run's noise multiplier
    double count_noise = 0;   // sigma_b; 0: max(expected_kept / 20, Z), or Z when per_client
    int expected_kept = 1;    // m's expected value (the round's K)
    bool per_client = false;  // local DP: sigma_b is each client's own noise
    uint64_t seed = 1;
  };
  // INVALID_ARGUMENT when sigma_b leaves the updates no budget (2 sigma_b <= Z).
  static StatusOr<AdaptiveClip> Make(const Options& o);

  double clip() const { return clip_; }                  // S_t
  double update_noise() const { return update_noise_; }  // z_u
  double count_noise() const { return count_noise_; }    // sigma_b
  // The round's sum's noise std: z_u S_t.
  double noise_std() const { return update_noise_ * clip_; }
  // Central DP: round `round` closed with `within` of its `kept` uploads within clip(): adds the
  // count's noise and steps S. The noisy fraction it used is returned.
  double EndRound(int64_t round, int64_t within, int64_t kept);
  // Local and distributed DP: the clients noised the count already; `noisy_within` is it (the
  // sum of their centred bits plus kept / 2). Steps S; returns the fraction.
  double Step(double noisy_within, int64_t kept);

  // Durability: S_t is the whole state.
  void Restore(double clip) { clip_ = clip; }

 private:
  AdaptiveClip() = default;
  Options o_;
  double clip_ = 1, update_noise_ = 1, count_noise_ = 1;
};

}  // namespace hetps
