// FedPrivacy: the (epsilon, delta) a federated run has spent under --dp (common/privacy.h),
// with the RDP accountant (common/rdp_accountant.h), updated at every aggregation:
//   central  each round is one sampled Gaussian mechanism with noise multiplier Z and sampling
//            rate q = the clients it selected / the live training clients (uniform selection;
//            the accountant's amplification assumes Poisson sampling, the usual approximation)
//   local    each client's uploads are Gaussian mechanisms the servers see (no amplification:
//            they know who uploaded); the run reports the worst client's: the one whose uploads
//            were aggregated most often
// With adaptive clipping it holds the clip (common/adaptive_clip.h): each round's clip, the
// noise its close asks of the servers (central) or its task of the clients (local,
// distributed) come from here, and the kept clients' bits step it. Adaptive clipping's own
// noise is within the run's multiplier: the accountant counts the same mechanism.
// Thread-safety: none; owned by FedRounds.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/adaptive_clip.h"
#include "common/privacy.h"
#include "common/rdp_accountant.h"
#include "durable.pb.h"

namespace hetps {

class FedPrivacy {
 public:
  // `expected_kept`: the uploads a round keeps (adaptive clipping's default count noise).
  explicit FedPrivacy(Privacy p, int expected_kept = 1, uint64_t seed = 1);
  // Adaptive clipping's parameters can leave the updates no budget: say so before a run.
  static Status Check(const Privacy& p, int expected_kept);

  bool adaptive() const { return clip_.has_value(); }
  // Adaptive: this round's clip, and the std of the noise on its sum (the close's).
  double clip() const { return clip_ ? clip_->clip() : p_.clip; }
  double noise_std() const { return clip_ ? clip_->noise_std() : p_.noise * p_.clip; }
  // Adaptive, local and distributed DP: the noise multiplier of the updates (z_u) and the
  // std of the bit's noise (sigma_b) the round's task tells the clients.
  double update_noise() const { return clip_ ? clip_->update_noise() : p_.noise; }
  double count_noise() const { return clip_ ? clip_->count_noise() : 0; }
  // Adaptive, central DP: round `round` closed with `within` of its `kept` uploads' norms
  // within clip().
  void RoundClosed(int64_t round, int64_t within, int64_t kept);
  // Adaptive, local and distributed DP: the clients' noised count (AdaptiveClip::Step).
  void RoundClosedNoisy(int64_t round, double noisy_within, int64_t kept);

  // An aggregation of the uploads of `kept` (ranks); `selected` of `population` live training
  // clients were selected for its round.
  void Applied(const std::vector<int>& kept, int selected, int population);
  // The epsilon spent so far at the spec's delta (none without --dp).
  std::optional<double> epsilon() const;
  const Privacy& spec() const { return p_; }

  void Save(proto::FedPrivacyState& s) const;
  void Restore(const proto::FedPrivacyState& s);

 private:
  Privacy p_;
  std::optional<AdaptiveClip> clip_;
  RdpAccountant central_;
  std::map<int, int64_t> uploads_;  // local: aggregated uploads per rank
  int64_t most_ = 0;                // local: the most of any client
};

}  // namespace hetps
