#include "scheduler/fed_privacy.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace hetps {
namespace {

AdaptiveClip::Options ClipOptions(const Privacy& p, int expected_kept, uint64_t seed) {
  return {.initial = p.clip,
          .quantile = p.quantile,
          .lr = p.clip_lr,
          .noise = p.noise,
          .count_noise = p.count_noise,
          .expected_kept = expected_kept,
          .per_client = p.mode == Privacy::Mode::kLocal,
          .seed = seed};
}

}  // namespace

FedPrivacy::FedPrivacy(Privacy p, int expected_kept, uint64_t seed) : p_(p) {
  if (!p_.adaptive()) return;
  auto made = AdaptiveClip::Make(ClipOptions(p_, expected_kept, seed));
  if (made.ok()) clip_ = *made;  // checked before (Check)
}

Status FedPrivacy::Check(const Privacy& p, int expected_kept) {
  if (!p.adaptive()) return Status();
  return AdaptiveClip::Make(ClipOptions(p, expected_kept, 1)).status();
}

void FedPrivacy::RoundClosed(int64_t round, int64_t within, int64_t kept) {
  if (!clip_) return;
  const double before = clip_->clip();
  const double fraction = clip_->EndRound(round, within, kept);
  spdlog::info(
      "round {}: {} of {} updates within clip {:.4g} (noisy fraction {:.3f}); next clip "
      "{:.4g}",
      round, within, kept, before, fraction, clip_->clip());
}

void FedPrivacy::RoundClosedNoisy(int64_t round, double noisy_within, int64_t kept) {
  if (!clip_) return;
  const double before = clip_->clip();
  clip_->Step(noisy_within, kept);
  spdlog::info(
      "round {}: a noisy {:.2f} of {} updates within clip {:.4g} (counted by the clients); next "
      "clip {:.4g}",
      round, noisy_within, kept, before, clip_->clip());
}

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
  if (clip_) s.set_clip(clip_->clip());
}

void FedPrivacy::Restore(const proto::FedPrivacyState& s) {
  central_.Restore({s.rdp().begin(), s.rdp().end()}, s.steps());
  uploads_ = {s.uploads().begin(), s.uploads().end()};
  if (clip_ && s.has_clip() && s.clip() > 0) clip_->Restore(s.clip());
  most_ = 0;
  for (const auto& [rank, n] : uploads_) most_ = std::max(most_, n);
}

}  // namespace hetps
