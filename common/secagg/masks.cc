#include "common/secagg/masks.h"

#include <sodium.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace hetps::secagg {
namespace {

constexpr int64_t kWordsPerBlock = 16;     // a ChaCha20 block is 64 bytes
constexpr int64_t kBlocksPerChunk = 1024;  // 64 KiB of keystream at a time
constexpr int kMaxBits = 24;

}  // namespace

int FixedPointBits(double total_weight) {
  if (!(total_weight > 0)) return kMaxBits;
  const double room = std::ldexp(1.0, 30) / total_weight;
  if (room < 2) return 0;
  return std::min(kMaxBits, static_cast<int>(std::floor(std::log2(room))));
}

FixedPoint CountFixedPoint(double count_noise, int kept) {
  const int k = std::max(kept, 1);
  return {.clip = 0.5 + 8 * std::max(count_noise, 0.0) / std::sqrt(static_cast<double>(k)),
          .bits = FixedPointBits(k)};
}

void Encode(const float* x, int64_t n, double weight, const FixedPoint& fp, uint32_t* words) {
  const double scale = weight * std::ldexp(1.0, fp.bits) / fp.clip;
  for (int64_t i = 0; i < n; ++i) {
    const double v = std::clamp(static_cast<double>(x[i]), -fp.clip, fp.clip) * scale;
    words[i] = static_cast<uint32_t>(static_cast<int32_t>(std::llround(v)));
  }
}

void Decode(const uint32_t* sum, int64_t n, const FixedPoint& fp, float* out) {
  const double unit = fp.clip / std::ldexp(1.0, fp.bits);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(static_cast<double>(static_cast<int32_t>(sum[i])) * unit);
  }
}

void AddMask(const Seed& seed, int64_t round, int32_t tensor, int64_t offset, int64_t n, int sign,
             uint32_t* words) {
  (void)Init();
  uint8_t nonce[crypto_stream_chacha20_ietf_NONCEBYTES] = {};
  std::memcpy(nonce, &round, sizeof round);
  std::memcpy(nonce + sizeof round, &tensor, sizeof tensor);
  std::vector<uint32_t> stream(kBlocksPerChunk * kWordsPerBlock);
  int64_t block = offset / kWordsPerBlock;
  int64_t skip = offset % kWordsPerBlock;  // words of the first block before `offset`
  for (int64_t done = 0; done < n;) {
    const int64_t blocks =
        std::min(kBlocksPerChunk, (skip + n - done + kWordsPerBlock - 1) / kWordsPerBlock);
    const size_t bytes = static_cast<size_t>(blocks * kWordsPerBlock) * sizeof(uint32_t);
    std::memset(stream.data(), 0, bytes);
    auto* s = reinterpret_cast<uint8_t*>(stream.data());
    crypto_stream_chacha20_ietf_xor_ic(s, s, bytes, nonce, static_cast<uint32_t>(block),
                                       seed.data());
    const int64_t take = std::min(n - done, blocks * kWordsPerBlock - skip);
    uint32_t* w = words + done;
    const uint32_t* m = stream.data() + skip;
    if (sign > 0) {
      for (int64_t i = 0; i < take; ++i) w[i] += m[i];
    } else {
      for (int64_t i = 0; i < take; ++i) w[i] -= m[i];
    }
    done += take;
    block += blocks;
    skip = 0;
  }
}

}  // namespace hetps::secagg
