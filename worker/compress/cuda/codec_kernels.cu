#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include "common/compress/qsgd.h"
#include "worker/compress/cuda/codec_kernels.h"

namespace hetps::compress::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSumChunk = 1024;  // = common/compress/util.h kSumChunk

int Blocks(int64_t n) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 16)));
}

#define HETPS_FOR_EACH(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

__device__ __forceinline__ float Magnitude(float v) { return v == v ? fabsf(v) : 0.0f; }

// One thread per chunk, lanes as on the CPU (util.h FixedOrderSum); no fused multiply-add.
__global__ void ChunkSums(const float* x, int64_t n, double* chunks) {
  constexpr int kLanes = 8;  // = common/compress/util.h kSumLanes
  const int64_t count = (n + kSumChunk - 1) / kSumChunk;
  HETPS_FOR_EACH(c, count) {
    double lane[kSums][kLanes] = {};
    const int64_t begin = c * kSumChunk, end = min(n, begin + kSumChunk);
    for (int64_t i = begin; i < end; ++i) {
      const int l = static_cast<int>((i - begin) % kLanes);
      const double v = x[i];
      lane[0][l] = __dadd_rn(lane[0][l], __dmul_rn(v, v));
      lane[1][l] = __dadd_rn(lane[1][l], v);
      lane[2][l] = __dadd_rn(lane[2][l], fabs(v));
      if (v < 0) {
        lane[3][l] = __dadd_rn(lane[3][l], v);
        lane[4][l] = __dadd_rn(lane[4][l], 1.0);
      }
    }
    for (int j = 0; j < kSums; ++j) {
      double chunk = 0;
      for (int l = 0; l < kLanes; ++l) chunk = __dadd_rn(chunk, lane[j][l]);
      chunks[c * kSums + j] = chunk;
    }
  }
}

__global__ void TotalSums(const double* chunks, int64_t count, double* out) {
  const int j = threadIdx.x;
  if (j >= kSums) return;
  double total = 0;
  for (int64_t c = 0; c < count; ++c) total = __dadd_rn(total, chunks[c * kSums + j]);
  out[j] = total;
}

__global__ void AddKernel(const float* a, const float* b, int64_t n, float* out) {
  HETPS_FOR_EACH(i, n) { out[i] = a[i] + b[i]; }
}

__global__ void SubtractKernel(const float* a, const float* b, int64_t n, float* out) {
  HETPS_FOR_EACH(i, n) { out[i] = a[i] - b[i]; }
}

__global__ void Fp16EncodeKernel(const float* x, int64_t n, uint16_t* out) {
  HETPS_FOR_EACH(i, n) {
    float v = x[i];
    if (v > 65504.0f) v = 65504.0f;  // comparisons, not fminf: NaN stays NaN as on the CPU
    if (v < -65504.0f) v = -65504.0f;
    out[i] = __half_as_ushort(__float2half_rn(v));
  }
}

__global__ void Fp16DecodeKernel(const uint16_t* in, int64_t n, float* out) {
  HETPS_FOR_EACH(i, n) { out[i] = __half2float(__ushort_as_half(in[i])); }
}

__global__ void RandomKEncodeKernel(const float* x, int64_t n, int64_t k, RngKey key, float scale,
                                    float* out) {
  const Permutation perm(key, static_cast<uint64_t>(n));
  HETPS_FOR_EACH(j, k) { out[j] = x[perm(j)] * scale; }
}

__global__ void RandomKDecodeKernel(const float* in, int64_t n, int64_t k, RngKey key, float* out) {
  const Permutation perm(key, static_cast<uint64_t>(n));
  HETPS_FOR_EACH(j, k) { out[perm(j)] = in[j]; }
}

// One thread per output byte: the codes of every element overlapping it.
__global__ void QsgdEncodeKernel(const float* x, int64_t n, const double* sums, uint32_t levels,
                                 int width, RngKey key, uint8_t* out) {
  const float norm = static_cast<float>(sqrt(sums[0]));
  const int64_t bytes = (n * width + 7) / 8;
  if (blockIdx.x == 0 && threadIdx.x == 0) *reinterpret_cast<float*>(out) = norm;
  HETPS_FOR_EACH(b, bytes) {
    const int64_t first = 8 * b / width, last = min(n - 1, (8 * b + 7) / width);
    uint32_t byte = 0;
    for (int64_t i = first; i <= last; ++i) {
      const uint32_t code = QsgdCode(x[i], norm, levels, key, i);
      for (int bit = 0; bit < width; ++bit) {
        const int64_t at = i * width + bit - 8 * b;
        if (at >= 0 && at < 8) byte |= (code >> bit & 1u) << at;
      }
    }
    out[4 + b] = static_cast<uint8_t>(byte);
  }
}

__global__ void QsgdDecodeKernel(const uint8_t* in, int64_t n, uint32_t levels, int width,
                                 float* out) {
  const float norm = *reinterpret_cast<const float*>(in);
  HETPS_FOR_EACH(i, n) {
    uint32_t code = 0;
    for (int bit = 0; bit < width; ++bit) {
      const int64_t at = i * width + bit;
      code |= static_cast<uint32_t>(in[4 + (at >> 3)] >> (at & 7) & 1u) << bit;
    }
    const float q = norm * static_cast<float>(code >> 1) / static_cast<float>(levels);
    out[i] = code & 1u ? -q : q;
  }
}

__global__ void SignHeader(const double* sums, int64_t n, bool onebit, float* out) {
  if (onebit) {
    const double negatives = sums[4], rest = static_cast<double>(n) - negatives;
    out[0] = negatives > 0 ? static_cast<float>(sums[3] / negatives) : 0.0f;
    out[1] = rest > 0 ? static_cast<float>((sums[1] - sums[3]) / rest) : 0.0f;
  } else {
    out[0] = n ? static_cast<float>(sums[2] / static_cast<double>(n)) : 0.0f;
  }
}

__global__ void PackSigns(const float* x, int64_t n, uint8_t* bits) {
  HETPS_FOR_EACH(b, (n + 7) / 8) {
    uint32_t byte = 0;
    for (int j = 0; j < 8 && 8 * b + j < n; ++j) byte |= (x[8 * b + j] < 0.0f ? 1u : 0u) << j;
    bits[b] = static_cast<uint8_t>(byte);
  }
}

__global__ void SignDecodeKernel(const uint8_t* in, int64_t n, int header_floats, float* out) {
  const float* h = reinterpret_cast<const float*>(in);
  const float negative = header_floats == 2 ? h[0] : -h[0];
  const float positive = header_floats == 2 ? h[1] : h[0];
  const uint8_t* bits = in + 4 * header_floats;
  HETPS_FOR_EACH(i, n) { out[i] = bits[i >> 3] >> (i & 7) & 1 ? negative : positive; }
}

// Max of the bits of non-negative, non-NaN floats (which order as unsigned integers) of a
// warp, then one atomic per warp. Every lane of the warp must call it.
__device__ __forceinline__ void WarpMaxInto(float v, unsigned* out) {
  unsigned bits = __float_as_uint(v);
  for (int offset = 16; offset > 0; offset >>= 1) {
    bits = max(bits, __shfl_down_sync(0xffffffffu, bits, offset));
  }
  if ((threadIdx.x & 31) == 0) atomicMax(out, bits);
}

__device__ __forceinline__ void WarpSumInto(unsigned long long v, unsigned long long* out) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  if ((threadIdx.x & 31) == 0 && v) atomicAdd(out, v);
}

// std::min(|v|, clip) as the CPU computes it: NaN magnitudes stay NaN, a NaN clip clips nothing.
__device__ __forceinline__ float Clipped(float v, float clip) {
  const float a = fabsf(v);
  return clip < a ? clip : a;
}

// scratch[0] = the clip, 2.5 sqrt(max(0, E[x^2] - E[x]^2)); scratch[1] = +0 (s, before the max).
__global__ void TernGradClip(const double* sums, int64_t n, float* scratch) {
  const double mean = __ddiv_rn(sums[1], static_cast<double>(n));
  const double square = __ddiv_rn(sums[0], static_cast<double>(n));
  const double variance = __dsub_rn(square, __dmul_rn(mean, mean));
  scratch[0] = __double2float_rn(__dmul_rn(2.5, sqrt(0.0 < variance ? variance : 0.0)));
  scratch[1] = 0.0f;
}

// scratch[1] = max of min(|x|, clip), NaNs left out (std::max(s, NaN) keeps s).
__global__ void TernGradScaleKernel(const float* x, int64_t n, float* scratch) {
  const float clip = scratch[0];
  float s = 0.0f;
  HETPS_FOR_EACH(i, n) {
    const float m = Clipped(x[i], clip);
    s = s < m ? m : s;
  }
  WarpMaxInto(s, reinterpret_cast<unsigned*>(scratch + 1));
}

// One thread per output byte (4 elements): code 1 (+s) or 2 (-s) with probability
// min(|x|, clip) / s, drawn from the same Philox numbers as the CPU.
__global__ void TernGradEncodeKernel(const float* x, int64_t n, const float* scratch, RngKey key,
                                     uint8_t* out) {
  const float clip = scratch[0], s = scratch[1];
  if (blockIdx.x == 0 && threadIdx.x == 0) *reinterpret_cast<float*>(out) = s;
  HETPS_FOR_EACH(b, (n + 3) / 4) {
    uint32_t byte = 0;
    if (s > 0) {
      for (int j = 0; j < 4 && 4 * b + j < n; ++j) {
        const int64_t i = 4 * b + j;
        if (Uniform(key, static_cast<uint64_t>(i)) < __fdiv_rn(Clipped(x[i], clip), s)) {
          byte |= (x[i] < 0 ? 2u : 1u) << (2 * j);
        }
      }
    }
    out[4 + b] = static_cast<uint8_t>(byte);
  }
}

__global__ void TernGradDecodeKernel(const uint8_t* in, int64_t n, float* out) {
  const float s = *reinterpret_cast<const float*>(in);
  HETPS_FOR_EACH(i, n) {
    const uint32_t code = in[4 + (i >> 2)] >> (2 * (i & 3)) & 3u;
    out[i] = code == 1 ? s : (code == 2 ? -s : 0.0f);  // 3 is malformed: the CPU refuses it
  }
}

__global__ void DgcAccumulateKernel(const float* g, int64_t n, float momentum, float* u, float* v) {
  HETPS_FOR_EACH(i, n) {
    const float ui = __fadd_rn(__fmul_rn(momentum, u[i]), g[i]);
    u[i] = ui;
    v[i] = __fadd_rn(v[i], ui);
  }
}

__global__ void StridedAbs(const float* v, int64_t count, int64_t stride, float* out) {
  HETPS_FOR_EACH(j, count) { out[j] = fabsf(v[j * stride]); }
}

__device__ __forceinline__ bool DgcPasses(float v, float threshold) {
  return v != 0.0f && fabsf(v) >= threshold;
}

__global__ void DgcCountKernel(const float* v, int64_t n, float threshold,
                               unsigned long long* passed) {
  unsigned long long count = 0;
  HETPS_FOR_EACH(i, n) { count += DgcPasses(v[i], threshold); }
  WarpSumInto(count, passed);
}

__global__ void DgcFlags(const float* v, int64_t n, float threshold, uint8_t* flags) {
  HETPS_FOR_EACH(i, n) { flags[i] = DgcPasses(v[i], threshold); }
}

// out: count, then the indices (already there), then the values; v and u cleared there.
__global__ void DgcWrite(const int* count, float* v, float* u, uint8_t* out) {
  const int64_t k = *count;
  if (blockIdx.x == 0 && threadIdx.x == 0) *reinterpret_cast<uint32_t*>(out) = k;
  const auto* idx = reinterpret_cast<const uint32_t*>(out + 4);
  auto* val = reinterpret_cast<float*>(out + 4 + 4 * k);
  HETPS_FOR_EACH(j, k) {
    const uint32_t i = idx[j];
    val[j] = v[i];
    v[i] = 0.0f;
    u[i] = 0.0f;
  }
}

// Top-k helpers.
__global__ void Iota(uint32_t* out, int64_t n) {
  HETPS_FOR_EACH(i, n) { out[i] = static_cast<uint32_t>(i); }
}

__global__ void StridedMagnitudes(const float* x, int64_t m, int64_t stride, float* out) {
  HETPS_FOR_EACH(j, m) { out[j] = Magnitude(x[j * stride]); }
}

__global__ void AtLeast(const float* x, int64_t n, const float* threshold, uint8_t* flags) {
  const float t = *threshold;
  HETPS_FOR_EACH(i, n) { flags[i] = Magnitude(x[i]) >= t; }
}

__global__ void GatherMagnitudes(const float* x, const uint32_t* idx, const int* count,
                                 float* out) {
  HETPS_FOR_EACH(j, *count) { out[j] = Magnitude(x[idx[j]]); }
}

// flags: above the k-th magnitude, or equal to it (tie rank from the scan) while ties remain.
__global__ void TieFlags(const float* mags, const int* count, const float* sorted, int64_t k,
                         int* tie) {
  const float kth = sorted[k - 1];
  HETPS_FOR_EACH(j, *count) { tie[j] = mags[j] == kth; }
}

__global__ void CountAbove(const float* sorted, const int* count, int64_t k, int* above) {
  const float kth = sorted[k - 1];
  HETPS_FOR_EACH(j, *count) {
    if (sorted[j] > kth && (j + 1 == *count || !(sorted[j + 1] > kth)))
      *above = static_cast<int>(j + 1);
  }
}

__global__ void FinalFlags(const float* mags, const int* count, const float* sorted, int64_t k,
                           const int* tie_rank, const int* above, uint8_t* flags) {
  const float kth = sorted[k - 1];
  const int need = static_cast<int>(k) - *above;
  HETPS_FOR_EACH(j, *count) { flags[j] = mags[j] > kth || (mags[j] == kth && tie_rank[j] < need); }
}

__global__ void GatherValues(const float* x, const uint32_t* idx, int64_t k, float* out) {
  HETPS_FOR_EACH(j, k) { out[j] = x[idx[j]]; }
}

__global__ void Scatter(const uint32_t* idx, const float* val, int64_t k, float* out) {
  HETPS_FOR_EACH(j, k) { out[idx[j]] = val[j]; }
}

// Carves aligned pieces out of one scratch allocation (or only measures it).
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* Take(int64_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (static_cast<size_t>(count) * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

struct TopKBuffers {
  float *sample, *sample_sorted, *mags, *mags_sorted, *threshold;
  uint32_t *iota, *candidates;
  uint8_t* flags;
  int *tie, *tie_rank, *count, *above;
  void* temp;
  size_t temp_bytes;
};

int64_t SampleSize(int64_t n) { return std::min<int64_t>(n, std::max<int64_t>(4096, n / 100)); }

TopKBuffers Carve(void* scratch, int64_t n, size_t* total) {
  Carver c(scratch);
  const int64_t m = SampleSize(n);
  TopKBuffers b;
  b.sample = c.Take<float>(m);
  b.sample_sorted = c.Take<float>(m);
  b.mags = c.Take<float>(n);
  b.mags_sorted = c.Take<float>(n);
  b.threshold = c.Take<float>(1);
  b.iota = c.Take<uint32_t>(n);
  b.candidates = c.Take<uint32_t>(n);
  b.flags = c.Take<uint8_t>(n);
  b.tie = c.Take<int>(n);
  b.tie_rank = c.Take<int>(n);
  b.count = c.Take<int>(1);
  b.above = c.Take<int>(1);
  size_t sort = 0, select = 0, scan = 0;
  const int items = static_cast<int>(n);
  cub::DeviceRadixSort::SortKeysDescending(nullptr, sort, b.mags, b.mags_sorted, items);
  cub::DeviceSelect::Flagged(nullptr, select, b.iota, b.flags, b.candidates, b.count, items);
  cub::DeviceScan::ExclusiveSum(nullptr, scan, b.tie, b.tie_rank, items);
  b.temp_bytes = std::max({sort, select, scan});
  b.temp = c.Take<char>(static_cast<int64_t>(b.temp_bytes));
  *total = c.used();
  return b;
}

}  // namespace

void FixedOrderSums(cudaStream_t s, const float* x, int64_t n, double* chunks, double* out) {
  const int64_t count = (n + kSumChunk - 1) / kSumChunk;
  ChunkSums<<<Blocks(count), kThreads, 0, s>>>(x, n, chunks);
  TotalSums<<<1, kSums, 0, s>>>(chunks, count, out);
}

void Add(cudaStream_t s, const float* a, const float* b, int64_t n, float* out) {
  AddKernel<<<Blocks(n), kThreads, 0, s>>>(a, b, n, out);
}

void Subtract(cudaStream_t s, const float* a, const float* b, int64_t n, float* out) {
  SubtractKernel<<<Blocks(n), kThreads, 0, s>>>(a, b, n, out);
}

void Fp16Encode(cudaStream_t s, const float* x, int64_t n, uint8_t* out) {
  Fp16EncodeKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, reinterpret_cast<uint16_t*>(out));
}

void Fp16Decode(cudaStream_t s, const uint8_t* in, int64_t n, float* out) {
  Fp16DecodeKernel<<<Blocks(n), kThreads, 0, s>>>(reinterpret_cast<const uint16_t*>(in), n, out);
}

void RandomKEncode(cudaStream_t s, const float* x, int64_t n, int64_t k, RngKey key, float scale,
                   uint8_t* out) {
  RandomKEncodeKernel<<<Blocks(k), kThreads, 0, s>>>(x, n, k, key, scale,
                                                     reinterpret_cast<float*>(out));
}

void RandomKDecode(cudaStream_t s, const uint8_t* in, int64_t n, int64_t k, RngKey key,
                   float* out) {
  cudaMemsetAsync(out, 0, n * sizeof(float), s);
  RandomKDecodeKernel<<<Blocks(k), kThreads, 0, s>>>(reinterpret_cast<const float*>(in), n, k, key,
                                                     out);
}

void QsgdEncode(cudaStream_t s, const float* x, int64_t n, const double* sums, uint32_t levels,
                int width, RngKey key, uint8_t* out) {
  QsgdEncodeKernel<<<Blocks((n * width + 7) / 8), kThreads, 0, s>>>(x, n, sums, levels, width, key,
                                                                    out);
}

void QsgdDecode(cudaStream_t s, const uint8_t* in, int64_t n, uint32_t levels, int width,
                float* out) {
  QsgdDecodeKernel<<<Blocks(n), kThreads, 0, s>>>(in, n, levels, width, out);
}

void OneBitEncode(cudaStream_t s, const float* x, int64_t n, const double* sums, uint8_t* out) {
  SignHeader<<<1, 1, 0, s>>>(sums, n, true, reinterpret_cast<float*>(out));
  PackSigns<<<Blocks((n + 7) / 8), kThreads, 0, s>>>(x, n, out + 8);
}

void EfSignEncode(cudaStream_t s, const float* x, int64_t n, const double* sums, uint8_t* out) {
  SignHeader<<<1, 1, 0, s>>>(sums, n, false, reinterpret_cast<float*>(out));
  PackSigns<<<Blocks((n + 7) / 8), kThreads, 0, s>>>(x, n, out + 4);
}

void SignDecode(cudaStream_t s, const uint8_t* in, int64_t n, int header_floats, float* out) {
  SignDecodeKernel<<<Blocks(n), kThreads, 0, s>>>(in, n, header_floats, out);
}

void TernGradEncode(cudaStream_t s, const float* x, int64_t n, const double* sums, RngKey key,
                    float* scratch, uint8_t* out) {
  TernGradClip<<<1, 1, 0, s>>>(sums, n, scratch);
  TernGradScaleKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, scratch);
  TernGradEncodeKernel<<<Blocks((n + 3) / 4), kThreads, 0, s>>>(x, n, scratch, key, out);
}

void TernGradDecode(cudaStream_t s, const uint8_t* in, int64_t n, float* out) {
  TernGradDecodeKernel<<<Blocks(n), kThreads, 0, s>>>(in, n, out);
}

void DgcAccumulate(cudaStream_t s, const float* g, int64_t n, float momentum, float* u, float* v) {
  DgcAccumulateKernel<<<Blocks(n), kThreads, 0, s>>>(g, n, momentum, u, v);
}

void DgcSampleMagnitudes(cudaStream_t s, const float* v, int64_t count, int64_t stride,
                         float* out) {
  StridedAbs<<<Blocks(count), kThreads, 0, s>>>(v, count, stride, out);
}

void DgcCount(cudaStream_t s, const float* v, int64_t n, float threshold,
              unsigned long long* passed) {
  cudaMemsetAsync(passed, 0, sizeof(*passed), s);
  DgcCountKernel<<<Blocks(n), kThreads, 0, s>>>(v, n, threshold, passed);
}

namespace {

struct DgcBuffers {
  uint32_t* iota;
  uint8_t* flags;
  void* temp;
  size_t temp_bytes;
};

DgcBuffers CarveDgc(void* scratch, int64_t n, size_t* total) {
  Carver c(scratch);
  DgcBuffers b;
  b.iota = c.Take<uint32_t>(n);
  b.flags = c.Take<uint8_t>(n);
  b.temp_bytes = 0;
  cub::DeviceSelect::Flagged(nullptr, b.temp_bytes, b.iota, b.flags, b.iota,
                             static_cast<int*>(nullptr), static_cast<int>(n));
  b.temp = c.Take<char>(static_cast<int64_t>(b.temp_bytes));
  *total = c.used();
  return b;
}

}  // namespace

size_t DgcScratchBytes(int64_t n) {
  size_t total = 0;
  CarveDgc(nullptr, n, &total);
  return total;
}

cudaError_t DgcSelect(cudaStream_t s, float* v, float* u, int64_t n, float threshold, void* scratch,
                      uint8_t* out, int* count) {
  size_t total = 0;
  DgcBuffers b = CarveDgc(scratch, n, &total);
  Iota<<<Blocks(n), kThreads, 0, s>>>(b.iota, n);
  DgcFlags<<<Blocks(n), kThreads, 0, s>>>(v, n, threshold, b.flags);
  size_t bytes = b.temp_bytes;
  cudaError_t e = cub::DeviceSelect::Flagged(b.temp, bytes, b.iota, b.flags,
                                             reinterpret_cast<uint32_t*>(out + 4), count,
                                             static_cast<int>(n), s);
  if (e != cudaSuccess) return e;
  DgcWrite<<<Blocks(n), kThreads, 0, s>>>(count, v, u, out);
  return cudaGetLastError();
}

size_t TopKScratchBytes(int64_t n) {
  size_t total = 0;
  Carve(nullptr, n, &total);
  return total;
}

cudaError_t TopKEncode(cudaStream_t s, const float* x, int64_t n, int64_t k, void* scratch,
                       uint8_t* out) {
  auto* out_idx = reinterpret_cast<uint32_t*>(out);
  auto* out_val = reinterpret_cast<float*>(out + 4 * k);
  size_t total = 0;
  TopKBuffers b = Carve(scratch, n, &total);
  const int items = static_cast<int>(n);
  if (k >= n) {
    Iota<<<Blocks(n), kThreads, 0, s>>>(out_idx, n);
    GatherValues<<<Blocks(n), kThreads, 0, s>>>(x, out_idx, n, out_val);
    return cudaGetLastError();
  }
  // Threshold: the magnitude ranking about 1.5k / n of a strided sample (as on the CPU).
  const int64_t m = SampleSize(n), stride = n / m;
  StridedMagnitudes<<<Blocks(m), kThreads, 0, s>>>(x, m, stride, b.sample);
  size_t bytes = b.temp_bytes;
  cudaError_t e = cub::DeviceRadixSort::SortKeysDescending(b.temp, bytes, b.sample, b.sample_sorted,
                                                           static_cast<int>(m), 0, 32, s);
  if (e != cudaSuccess) return e;
  Iota<<<Blocks(n), kThreads, 0, s>>>(b.iota, n);
  int64_t rank = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(1.5 * static_cast<double>(k) / n * m)), 1, m);
  int count = 0;
  while (true) {
    if (rank < m) {
      e = cudaMemcpyAsync(b.threshold, b.sample_sorted + rank - 1, sizeof(float),
                          cudaMemcpyDeviceToDevice, s);
    } else {
      e = cudaMemsetAsync(b.threshold, 0, sizeof(float), s);
    }
    if (e != cudaSuccess) return e;
    AtLeast<<<Blocks(n), kThreads, 0, s>>>(x, n, b.threshold, b.flags);
    bytes = b.temp_bytes;
    e = cub::DeviceSelect::Flagged(b.temp, bytes, b.iota, b.flags, b.candidates, b.count, items, s);
    if (e != cudaSuccess) return e;
    e = cudaMemcpyAsync(&count, b.count, sizeof(int), cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return e;
    if (count >= k || rank >= m) break;
    rank = std::min(m, rank * 2);
  }
  // The k-th magnitude among the candidates, then exactly k of them in index order.
  GatherMagnitudes<<<Blocks(count), kThreads, 0, s>>>(x, b.candidates, b.count, b.mags);
  bytes = b.temp_bytes;
  e = cub::DeviceRadixSort::SortKeysDescending(b.temp, bytes, b.mags, b.mags_sorted, count, 0, 32,
                                               s);
  if (e != cudaSuccess) return e;
  cudaMemsetAsync(b.above, 0, sizeof(int), s);
  CountAbove<<<Blocks(count), kThreads, 0, s>>>(b.mags_sorted, b.count, k, b.above);
  TieFlags<<<Blocks(count), kThreads, 0, s>>>(b.mags, b.count, b.mags_sorted, k, b.tie);
  bytes = b.temp_bytes;
  e = cub::DeviceScan::ExclusiveSum(b.temp, bytes, b.tie, b.tie_rank, count, s);
  if (e != cudaSuccess) return e;
  FinalFlags<<<Blocks(count), kThreads, 0, s>>>(b.mags, b.count, b.mags_sorted, k, b.tie_rank,
                                                b.above, b.flags);
  bytes = b.temp_bytes;
  e = cub::DeviceSelect::Flagged(b.temp, bytes, b.candidates, b.flags, out_idx, b.count, count, s);
  if (e != cudaSuccess) return e;
  GatherValues<<<Blocks(k), kThreads, 0, s>>>(x, out_idx, k, out_val);
  return cudaGetLastError();
}

void SparseDecode(cudaStream_t s, const uint8_t* in, int64_t n, int64_t k, float* out) {
  cudaMemsetAsync(out, 0, n * sizeof(float), s);
  Scatter<<<Blocks(k), kThreads, 0, s>>>(reinterpret_cast<const uint32_t*>(in),
                                         reinterpret_cast<const float*>(in + 4 * k), k, out);
}

}  // namespace hetps::compress::cuda
