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

}  // namespace

FixedPoint CountFixedPoint(double count_noise, int kept) {
  const int k = std::max(kept, 1);
  return {.clip = 0.5 + 8 * std::max(count_noise, 0.0) / std::sqrt(static_cast<double>(k)),
          .bits = FixedPointBits(k)};
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
