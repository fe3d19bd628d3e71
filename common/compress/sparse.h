// The (index, value) layout of the sparsifiers: k ascending uint32 indices, then their k float
// values. Shared by topk and dgc.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "common/compress/util.h"
#include "common/status.h"

namespace hetps::compress {

// Checks k (index, value) pairs at data against n: indices strictly ascending and < n, values
// finite; then writes the dense vector (zeros elsewhere).
inline Status DecodeSparse(const uint8_t* data, int64_t k, int64_t n, float* out,
                           const char* codec) {
  std::memset(out, 0, sizeof(float) * n);
  int64_t previous = -1;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t i = Load<uint32_t>(data + 4 * j);
    const float v = Load<float>(data + 4 * (k + j));
    if (i <= previous || i >= n) {
      return Status::Malformed(
          fmt::format("{}: index {} at position {} is out of order or outside the {} elements",
                      codec, i, j, n));
    }
    if (!std::isfinite(v)) {
      return Status::Malformed(fmt::format("{}: value at index {} is not finite", codec, i));
    }
    out[i] = v;
    previous = i;
  }
  return Status();
}

}  // namespace hetps::compress
