// Exact top-k selection, shared by the topk codec and its CUDA twin's reference.
#pragma once

#include <cstdint>
#include <vector>

namespace hetps::compress {

// Indices, ascending, of the k elements of largest magnitude (ties go to the lower index; NaN
// counts as 0). Samples a threshold first, so only the candidates above it are ranked.
void SelectTopK(const float* x, int64_t n, int64_t k, std::vector<uint32_t>& indices);

}  // namespace hetps::compress
