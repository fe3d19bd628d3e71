// The CUDA kernels of the GPU codecs, launched on a stream; plain C++ interface so host code
// builds without nvcc. Each mirrors its CPU codec in common/compress bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/compress/philox.h"

namespace hetps::compress::cuda {

// Fixed-order sums of x (common/compress/util.h FixedOrderSum order): out[0] sum x^2,
// out[1] sum x, out[2] sum |x|, out[3] sum of negatives, out[4] count of negatives.
// chunks: scratch of 5 * ceil(n / kSumChunk) doubles.
constexpr int kSums = 5;
void FixedOrderSums(cudaStream_t s, const float* x, int64_t n, double* chunks, double* out);

void Add(cudaStream_t s, const float* a, const float* b, int64_t n, float* out);       // a + b
void Subtract(cudaStream_t s, const float* a, const float* b, int64_t n, float* out);  // a - b

void Fp16Encode(cudaStream_t s, const float* x, int64_t n, uint8_t* out);
void Fp16Decode(cudaStream_t s, const uint8_t* in, int64_t n, float* out);

// out: k float values x[perm(j)] * scale.
void RandomKEncode(cudaStream_t s, const float* x, int64_t n, int64_t k, RngKey key, float scale,
                   uint8_t* out);
void RandomKDecode(cudaStream_t s, const uint8_t* in, int64_t n, int64_t k, RngKey key, float* out);

// out: float norm (from sums[0]) then the packed codes.
void QsgdEncode(cudaStream_t s, const float* x, int64_t n, const double* sums, uint32_t levels,
                int width, RngKey key, uint8_t* out);
void QsgdDecode(cudaStream_t s, const uint8_t* in, int64_t n, uint32_t levels, int width,
                float* out);

// onebit: out = {negative mean, non-negative mean} then sign bits; efsign: {l1 / n} then bits.
void OneBitEncode(cudaStream_t s, const float* x, int64_t n, const double* sums, uint8_t* out);
void EfSignEncode(cudaStream_t s, const float* x, int64_t n, const double* sums, uint8_t* out);
// header_floats: 2 (onebit: negative, positive) or 1 (efsign: +-scale).
void SignDecode(cudaStream_t s, const uint8_t* in, int64_t n, int header_floats, float* out);

// terngrad (common/compress/terngrad.cc): the clip (2.5 standard deviations, from the fixed-order
// sums) and s = max min(|x|, clip) in scratch (kTernGradScratch floats), then out = float s
// and the 2-bit codes.
constexpr int kTernGradScratch = 2;
void TernGradEncode(cudaStream_t s, const float* x, int64_t n, const double* sums, RngKey key,
                    float* scratch, uint8_t* out);
void TernGradDecode(cudaStream_t s, const uint8_t* in, int64_t n, float* out);

// dgc (common/compress/dgc.cc; the host side chooses the density and thresholds by dgc.h):
// u = momentum u + g, v = v + u (no fused multiply-add, as on the CPU).
void DgcAccumulate(cudaStream_t s, const float* g, int64_t n, float momentum, float* u, float* v);
// out[j] = |v[j * stride]| for j < count.
void DgcSampleMagnitudes(cudaStream_t s, const float* v, int64_t count, int64_t stride, float* out);
// *passed (device; zeroed here) = how many elements pass: v != 0 and |v| >= threshold.
void DgcCount(cudaStream_t s, const float* v, int64_t n, float threshold,
              unsigned long long* passed);
// Writes those that pass as uint32 count, their ascending indices, their values of v, and
// clears v and u there; *count (device) receives the count. Needs DgcScratchBytes of scratch
// and out of 4 + 8n bytes.
size_t DgcScratchBytes(int64_t n);
cudaError_t DgcSelect(cudaStream_t s, float* v, float* u, int64_t n, float threshold, void* scratch,
                      uint8_t* out, int* count);

// Top-k (common/compress/topk.cc semantics): the k largest magnitudes, ties to the lower index,
// written as k ascending uint32 indices then k values. Needs TopKScratchBytes of scratch.
size_t TopKScratchBytes(int64_t n);
cudaError_t TopKEncode(cudaStream_t s, const float* x, int64_t n, int64_t k, void* scratch,
                       uint8_t* out);
void SparseDecode(cudaStream_t s, const uint8_t* in, int64_t n, int64_t k, float* out);

}  // namespace hetps::compress::cuda
