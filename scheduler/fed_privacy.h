// FedPrivacy: the (epsilon, delta) a federated run has spent under --dp (common/privacy.h),
// with the RDP accountant (common/rdp_accountant.h), updated at every aggregation:
//   central  each round is one sampled Gaussian mechanism with noise multiplier Z and sampling
//            rate q = the clients it selected / the live training clients (uniform selection;
//            the accountant's amplification assumes Poisson sampling, the usual approximation)
//   local    each client's uploads are Gaussian mechanisms the servers see (no amplification:
//            they know who uploaded); the run reports the worst client's: the one whose uploads
//            were aggregated most often
// Thread-safety: none; owned by FedRounds.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/privacy.h"
#include "common/rdp_accountant.h"
#include "durable.pb.h"

namespace hetps {

class FedPrivacy {
 public:
  explicit FedPrivacy(Privacy p) : p_(p) {}

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
  RdpAccountant central_;
  std::map<int, int64_t> uploads_;  // local: aggregated uploads per rank
  int64_t most_ = 0;                // local: the most of any client
};

}  // namespace hetps
