#include "server/initializer.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "common/mix.h"

namespace hetps {
namespace {

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// Uniform in (0, 1): 53 random bits, never exactly 0 (log() below).
double Unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace

StatusOr<Initializer> Initializer::Make(const InitOptions& options) {
  if (options.mode != "zeros" && options.mode != "uniform" && options.mode != "normal" &&
      options.mode != "worker") {
    return Status::InvalidArgument(
        fmt::format("unknown init '{}' (known: zeros, uniform, normal, worker)", options.mode));
  }
  if (options.scale < 0) return Status::InvalidArgument("init_scale must be >= 0");
  return Initializer(options);
}

void Initializer::Fill(const std::string& tensor, int64_t offset, float* out, int64_t n) const {
  if (options_.mode == "zeros") {
    std::fill(out, out + n, 0.0f);
    return;
  }
  const uint64_t key = SplitMix64(options_.seed ^ HashName(tensor));
  const double scale = options_.scale;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t j = static_cast<uint64_t>(offset + i);
    const uint64_t a = SplitMix64(key + 2 * j);
    if (options_.mode == "uniform") {
      out[i] = static_cast<float>(scale * (2 * Unit(a) - 1));
    } else {  // normal, Box-Muller
      const uint64_t b = SplitMix64(key + 2 * j + 1);
      out[i] = static_cast<float>(scale * std::sqrt(-2 * std::log(Unit(a))) *
                                  std::cos(2 * std::numbers::pi * Unit(b)));
    }
  }
}

}  // namespace hetps
