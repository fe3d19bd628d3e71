// The arithmetic of secure aggregation's uploads: fixed-point words in Z_2^32 and the masks
// added to them. A coordinate of a client's update x (weight w) becomes the word
// round(w * clamp(x, -clip, clip) * 2^bits / clip) mod 2^32, so that words add up exactly, and
// the sum of every kept client's words, read as a signed 32-bit integer, times clip / 2^bits is
// sum_k w_k clamp(x_k) (each word within 1/2 of its real value; bits chosen so the sum never
// wraps: FixedPointBits). A mask is the keystream of ChaCha20 (libsodium) keyed by a 32-byte seed,
// word i of tensor t in round r at nonce (r, t) and word index i: a client and a server that
// holds only a partition of the tensor (its offset and length) compute the same words.
#pragma once

#include <cstdint>

#include "common/fixed_point.h"
#include "common/secagg/crypto.h"

namespace hetps::secagg {

using hetps::FixedPoint;
using hetps::FixedPointBits;

// words[i] = the fixed-point word of weight * x[i] (common/fixed_point.h).
inline void Encode(const float* x, int64_t n, double weight, const FixedPoint& fp,
                   uint32_t* words) {
  EncodeFixedPoint(x, n, weight, fp, words);
}
// out[i] = the weighted sum that the summed words `sum` stand for.
inline void Decode(const uint32_t* sum, int64_t n, const FixedPoint& fp, float* out) {
  DecodeFixedPoint(sum, n, fp, out);
}

// Adaptive clipping under distributed DP: each kept client of a round of K adds to the masked
// sum one scalar, its centred bit (+-1/2) plus Gaussian noise of std `count_noise` / sqrt(K), as
// word 0 of the pseudo-tensor kCountTensor. Its fixed point: clipped at 1/2 plus 8 of those
// stds (clipping after the noise changes no guarantee) with the bits that K such words allow.
constexpr int32_t kCountTensor = -1;
FixedPoint CountFixedPoint(double count_noise, int kept);

// words[i] += sign * mask word (offset + i) of tensor `tensor` in round `round`, mod 2^32.
// sign is +1 or -1.
void AddMask(const Seed& seed, int64_t round, int32_t tensor, int64_t offset, int64_t n, int sign,
             uint32_t* words);

}  // namespace hetps::secagg
