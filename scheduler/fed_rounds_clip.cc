// FedRounds' adaptive clipping (--dp=MODE:...,quantile=Q; common/adaptive_clip.h): each round's
// task carries its clip (and, under local and distributed DP, the noise the clients add), the
// kept clients' bits step the clip when the round closes. Central DP: the bits come in the
// clear and the scheduler noises their count; local DP: each comes centred and noised by its
// client; distributed DP: each is a word masked like the client's upload, and the scheduler,
// which sends the servers the seeds that remove the masks, removes them from the words' sum
// the same way, learning only the noised count.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/secagg/masks.h"
#include "scheduler/fed_rounds.h"

namespace hetps {

void FedRounds::ClipTask(proto::FedRound& task) const {
  if (!privacy_.adaptive()) return;
  task.set_dp_clip(privacy_.clip());
  if (privacy_.spec().mode == Privacy::Mode::kCentral) return;
  task.set_dp_update_noise(privacy_.update_noise());
  task.set_dp_count_noise(privacy_.count_noise());
}

void FedRounds::TakeClipReport(int32_t id, const proto::FedRound& request) {
  if (!privacy_.adaptive()) return;
  if (!request.has_within_clip() && !request.has_within_noisy() && !request.has_within_masked()) {
    return;
  }
  ClipReport& r = within_clip_[id];
  r = ClipReport{};
  r.round = request.round();
  if (request.has_within_clip()) r.within = request.within_clip();
  if (request.has_within_noisy()) r.noisy = request.within_noisy();
  if (request.has_within_masked()) r.masked = request.within_masked();
}

// The round closes with uploads_ kept: its noise (central), then the clip steps for the next
// round, except under distributed DP, which keeps the kept uploads' words for StepClipSecure.
void FedRounds::StepClip(proto::FedRound& close) {
  if (!privacy_.adaptive()) return;
  closed_clip_ = privacy_.clip();
  const auto report = [&](int32_t id) -> const ClipReport* {
    auto it = within_clip_.find(id);
    return it != within_clip_.end() && it->second.round == round_ ? &it->second : nullptr;
  };
  const auto kept = static_cast<int64_t>(uploads_.size());
  switch (privacy_.spec().mode) {
    case Privacy::Mode::kCentral: {
      close.set_dp_noise_std(privacy_.noise_std());
      int64_t within = 0;
      for (int32_t id : uploads_) {
        const ClipReport* r = report(id);
        within += r != nullptr && r->within.value_or(false);
      }
      privacy_.RoundClosed(round_, within, kept);
      break;
    }
    case Privacy::Mode::kLocal: {
      // A centred bit is +-1/2 plus its client's noise; clamped at 8 of those stds, so that one
      // client cannot throw the clip off (clamping what was noised changes no guarantee).
      const double bound = 0.5 + 8 * privacy_.count_noise();
      double sum = 0;
      int64_t missing = 0;
      for (int32_t id : uploads_) {
        const ClipReport* r = report(id);
        if (r == nullptr || !r->noisy || !std::isfinite(*r->noisy)) {
          ++missing;  // counted as neither within nor beyond: its centred value is 0
          continue;
        }
        sum += std::clamp(*r->noisy, -bound, bound);
      }
      if (missing > 0) {
        spdlog::warn("round {}: {} kept clients did not report their noised bit", round_, missing);
      }
      privacy_.RoundClosedNoisy(round_, sum + static_cast<double>(kept) / 2, kept);
      break;
    }
    case Privacy::Mode::kDistributed: {
      std::vector<uint32_t> words;
      for (int32_t id : uploads_) {
        const ClipReport* r = report(id);
        if (r == nullptr || !r->masked) break;
        words.push_back(*r->masked);
      }
      if (words.size() == uploads_.size()) {
        count_words_ = std::move(words);
      } else {  // one word short and the masks no longer cancel: nothing can be read
        count_words_.reset();
        spdlog::warn("round {}: a kept client did not send its masked bit; the clip stays", round_);
      }
      break;
    }
    default:
      break;
  }
  within_clip_.clear();
}

// The secure round's kept clients are unmasked: their words' sum, less the masks the servers
// remove, is the sum of their noised centred bits.
void FedRounds::StepClipSecure(int64_t round, const proto::SecureClose& unmask) {
  std::optional<std::vector<uint32_t>> words = std::exchange(count_words_, std::nullopt);
  if (!words) return;
  uint32_t sum = 0;
  for (uint32_t w : *words) sum += w;
  for (const proto::MaskSeed& m : unmask.masks()) {
    secagg::Seed seed{};
    if (m.seed().size() != seed.size()) continue;  // Finish() made them: never
    std::copy(m.seed().begin(), m.seed().end(), seed.begin());
    secagg::AddMask(seed, round, secagg::kCountTensor, 0, 1, -m.sign(), &sum);
  }
  const secagg::FixedPoint fp = secagg::CountFixedPoint(privacy_.count_noise(), keep_);
  float centred = 0;
  secagg::Decode(&sum, 1, fp, &centred);
  const auto kept = static_cast<int64_t>(words->size());
  privacy_.RoundClosedNoisy(round, centred + static_cast<double>(kept) / 2, kept);
}

}  // namespace hetps
