// Counter-based randomness shared by the CPU codecs and their CUDA kernels, so both draw the
// same numbers for the same (seed, partition, step, element): Philox4x32-10 (Salmon et al.,
// SC'11) and a keyed permutation of [0, n) built on it (a Feistel network with cycle walking).
// Header-only; host and device.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define HETPS_HD __host__ __device__ __forceinline__
#else
#define HETPS_HD inline
#endif

namespace hetps::compress {

struct RngKey {
  uint64_t seed = 0;
  int32_t partition = 0;
  int64_t step = 0;
};

// Philox4x32-10 of counter (lo, hi, step, partition) under key (seed, step >> 32); word 0.
HETPS_HD uint32_t Philox(const RngKey& key, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = static_cast<uint32_t>(key.step), c3 = static_cast<uint32_t>(key.partition);
  uint32_t k0 = static_cast<uint32_t>(key.seed);
  uint32_t k1 = static_cast<uint32_t>(key.seed >> 32) ^ static_cast<uint32_t>(key.step >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}

// Uniform in [0, 1) with 24 random bits: exactly representable, identical on host and device.
HETPS_HD float Uniform(const RngKey& key, uint64_t counter) {
  return static_cast<float>(Philox(key, counter) >> 8) * (1.0f / 16777216.0f);
}

// A bijection of [0, n) keyed by `key`: a 4-round Feistel network on the smallest even number
// of bits covering n, walked until it lands inside [0, n). REQUIRES: 1 <= n < 2^62.
class Permutation {
 public:
  HETPS_HD Permutation(const RngKey& key, uint64_t n) : key_(key), n_(n) {
    int bits = 2;
    while ((uint64_t{1} << bits) < n) bits += 2;
    half_ = bits / 2;
    mask_ = (uint64_t{1} << half_) - 1;
  }
  HETPS_HD uint64_t operator()(uint64_t i) const {
    uint64_t x = i;
    do {
      uint64_t left = x >> half_, right = x & mask_;
      for (uint64_t round = 0; round < 4; ++round) {
        const uint64_t f = Philox(key_, (right << 2 | round) | (uint64_t{1} << 63)) & mask_;
        const uint64_t next = left ^ f;
        left = right;
        right = next;
      }
      x = left << half_ | right;
    } while (x >= n_);
    return x;
  }

 private:
  RngKey key_;
  uint64_t n_;
  int half_;
  uint64_t mask_;
};

}  // namespace hetps::compress
