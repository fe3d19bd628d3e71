#include "scheduler/fed_privacy.h"

#include <algorithm>

namespace hetps {

void FedPrivacy::Applied(const std::vector<int>& kept, int selected, int population) {
  if (!p_.on() || kept.empty()) return;
  if (p_.per_round()) {
    const double q =
        population > 0 ? std::clamp(static_cast<double>(selected) / population, 1e-12, 1.0) : 1.0;
    central_.AddSampledGaussian(q, p_.noise);
    return;
  }
  for (int rank : kept) most_ = std::max(most_, ++uploads_[rank]);
}

std::optional<double> FedPrivacy::epsilon() const {
  if (!p_.on()) return std::nullopt;
  if (p_.per_round()) return central_.Epsilon(p_.delta).first;
  if (most_ == 0) return 0.0;
  RdpAccountant worst;
  worst.AddSampledGaussian(1.0, p_.noise, most_);
  return worst.Epsilon(p_.delta).first;
}

void FedPrivacy::Save(proto::FedPrivacyState& s) const {
  s.mutable_rdp()->Add(central_.rdp().begin(), central_.rdp().end());
  s.set_steps(central_.steps());
  for (const auto& [rank, n] : uploads_) (*s.mutable_uploads())[rank] = n;
}

void FedPrivacy::Restore(const proto::FedPrivacyState& s) {
  central_.Restore({s.rdp().begin(), s.rdp().end()}, s.steps());
  uploads_ = {s.uploads().begin(), s.uploads().end()};
  most_ = 0;
  for (const auto& [rank, n] : uploads_) most_ = std::max(most_, n);
}

}  // namespace hetps
