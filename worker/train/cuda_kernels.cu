#include <algorithm>

#include "worker/train/cuda_kernels.h"

namespace hetps::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 16));
}

// Grid-stride loop over [0, n).
#define HETPS_FOR_EACH(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// out[n][c][j] += bias[c] for `batch` samples of c x inner.
__global__ void AddBiasKernel(float* out, const float* bias, int64_t batch, int channels,
                              int64_t inner) {
  HETPS_FOR_EACH(i, batch * channels * inner) { out[i] += bias[(i / inner) % channels]; }
}

// grad[c] = sum over samples n and positions j of delta[n][c][j]: one block per channel.
__global__ void ChannelSumKernel(const float* delta, int64_t batch, int channels, int64_t inner,
                                 float* grad) {
  __shared__ float partial[kThreads];
  const int c = blockIdx.x;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < batch * inner; i += blockDim.x) {
    const int64_t n = i / inner, j = i % inner;
    sum += delta[(n * channels + c) * inner + j];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) grad[c] = partial[0];
}

__global__ void ReluKernel(const float* in, float* out, int64_t n) {
  HETPS_FOR_EACH(i, n) { out[i] = fmaxf(in[i], 0.0f); }
}

// delta *= (out > 0)
__global__ void ReluBackwardKernel(const float* out, float* delta, int64_t n) {
  HETPS_FOR_EACH(i, n) {
    if (!(out[i] > 0.0f)) delta[i] = 0.0f;
  }
}

// col[n] (c*k*k rows, oh*ow columns) of image n; zero outside the image.
__global__ void Im2ColKernel(const float* in, Geometry g, int64_t batch, float* col) {
  const int64_t ohw = static_cast<int64_t>(g.oh) * g.ow;
  const int64_t per_sample = static_cast<int64_t>(g.c) * g.k * g.k * ohw;
  HETPS_FOR_EACH(i, batch * per_sample) {
    const int64_t n = i / per_sample, r = i % per_sample;
    const int64_t row = r / ohw, pos = r % ohw;
    const int kx = static_cast<int>(row % g.k), ky = static_cast<int>((row / g.k) % g.k);
    const int c = static_cast<int>(row / (g.k * g.k));
    const int iy = static_cast<int>(pos / g.ow) - g.pad + ky;
    const int ix = static_cast<int>(pos % g.ow) - g.pad + kx;
    col[i] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? in[((n * g.c + c) * g.h + iy) * g.w + ix]
                                                        : 0.0f;
  }
}

// in[n][c][y][x] = sum of the col[n] entries copied from it (gather: no atomics).
__global__ void Col2ImKernel(const float* col, Geometry g, int64_t batch, float* in) {
  const int64_t ohw = static_cast<int64_t>(g.oh) * g.ow;
  const int64_t image = static_cast<int64_t>(g.c) * g.h * g.w;
  HETPS_FOR_EACH(i, batch * image) {
    const int64_t n = i / image, r = i % image;
    const int c = static_cast<int>(r / (g.h * g.w));
    const int y = static_cast<int>((r / g.w) % g.h), x = static_cast<int>(r % g.w);
    const float* base = col + n * static_cast<int64_t>(g.c) * g.k * g.k * ohw;
    float sum = 0;
    for (int ky = 0; ky < g.k; ++ky) {
      const int oy = y + g.pad - ky;
      if (oy < 0 || oy >= g.oh) continue;
      for (int kx = 0; kx < g.k; ++kx) {
        const int ox = x + g.pad - kx;
        if (ox < 0 || ox >= g.ow) continue;
        sum += base[((c * g.k + ky) * g.k + kx) * ohw + oy * g.ow + ox];
      }
    }
    in[i] = sum;
  }
}

// Non-overlapping k x k max pooling; arg gets each output's input index within its sample.
__global__ void MaxPoolKernel(const float* in, Geometry g, int64_t batch, float* out,
                              int32_t* arg) {
  const int64_t per_sample = static_cast<int64_t>(g.oc) * g.oh * g.ow;
  HETPS_FOR_EACH(i, batch * per_sample) {
    const int64_t n = i / per_sample, r = i % per_sample;
    const int c = static_cast<int>(r / (g.oh * g.ow));
    const int oy = static_cast<int>((r / g.ow) % g.oh), ox = static_cast<int>(r % g.ow);
    const float* src = in + n * static_cast<int64_t>(g.c) * g.h * g.w;
    int32_t at = (c * g.h + oy * g.k) * g.w + ox * g.k;
    for (int dy = 0; dy < g.k; ++dy) {
      for (int dx = 0; dx < g.k; ++dx) {
        const int32_t j = (c * g.h + oy * g.k + dy) * g.w + ox * g.k + dx;
        if (src[j] > src[at]) at = j;
      }
    }
    out[i] = src[at];
    arg[i] = at;
  }
}

// Windows do not overlap, so each input receives at most one output's delta. `in` is zeroed
// before.
__global__ void MaxPoolBackwardKernel(const float* delta, const int32_t* arg, Geometry g,
                                      int64_t batch, float* in) {
  const int64_t per_sample = static_cast<int64_t>(g.oc) * g.oh * g.ow;
  HETPS_FOR_EACH(i, batch * per_sample) {
    const int64_t n = i / per_sample;
    in[n * static_cast<int64_t>(g.c) * g.h * g.w + arg[i]] = delta[i];
  }
}

// One thread per sample: loss[n] = -log softmax(z)[y]; delta = (softmax - onehot) / batch.
__global__ void SoftmaxCrossEntropyKernel(const float* logits, const int32_t* y, int64_t batch,
                                          int classes, float* delta, float* loss) {
  HETPS_FOR_EACH(n, batch) {
    const float* z = logits + n * classes;
    float* d = delta + n * classes;
    float max = z[0];
    for (int c = 1; c < classes; ++c) max = fmaxf(max, z[c]);
    float sum = 0;
    for (int c = 0; c < classes; ++c) sum += d[c] = expf(z[c] - max);
    const float p = d[y[n]] / sum;
    loss[n] = -logf(fmaxf(p, 1e-30f));
    for (int c = 0; c < classes; ++c) {
      d[c] = (d[c] / sum - (c == y[n] ? 1.0f : 0.0f)) / static_cast<float>(batch);
    }
  }
}

}  // namespace

void AddBias(cudaStream_t s, float* out, const float* bias, int64_t batch, int channels,
             int64_t inner) {
  AddBiasKernel<<<Blocks(batch * channels * inner), kThreads, 0, s>>>(out, bias, batch, channels,
                                                                      inner);
}

void ChannelSum(cudaStream_t s, const float* delta, int64_t batch, int channels, int64_t inner,
                float* grad) {
  ChannelSumKernel<<<static_cast<unsigned>(channels), kThreads, 0, s>>>(delta, batch, channels,
                                                                        inner, grad);
}

void Relu(cudaStream_t s, const float* in, float* out, int64_t n) {
  ReluKernel<<<Blocks(n), kThreads, 0, s>>>(in, out, n);
}

void ReluBackward(cudaStream_t s, const float* out, float* delta, int64_t n) {
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(out, delta, n);
}

void Im2Col(cudaStream_t s, const float* in, const Geometry& g, int64_t batch, float* col) {
  const int64_t n = batch * g.c * g.k * g.k * static_cast<int64_t>(g.oh) * g.ow;
  Im2ColKernel<<<Blocks(n), kThreads, 0, s>>>(in, g, batch, col);
}

void Col2Im(cudaStream_t s, const float* col, const Geometry& g, int64_t batch, float* in) {
  const int64_t n = batch * g.c * static_cast<int64_t>(g.h) * g.w;
  Col2ImKernel<<<Blocks(n), kThreads, 0, s>>>(col, g, batch, in);
}

void MaxPool(cudaStream_t s, const float* in, const Geometry& g, int64_t batch, float* out,
             int32_t* arg) {
  const int64_t n = batch * g.oc * static_cast<int64_t>(g.oh) * g.ow;
  MaxPoolKernel<<<Blocks(n), kThreads, 0, s>>>(in, g, batch, out, arg);
}

void MaxPoolBackward(cudaStream_t s, const float* delta, const int32_t* arg, const Geometry& g,
                     int64_t batch, float* in) {
  cudaMemsetAsync(in, 0, batch * g.c * static_cast<int64_t>(g.h) * g.w * sizeof(float), s);
  const int64_t n = batch * g.oc * static_cast<int64_t>(g.oh) * g.ow;
  MaxPoolBackwardKernel<<<Blocks(n), kThreads, 0, s>>>(delta, arg, g, batch, in);
}

void SoftmaxCrossEntropy(cudaStream_t s, const float* logits, const int32_t* y, int64_t batch,
                         int classes, float* delta, float* loss) {
  SoftmaxCrossEntropyKernel<<<Blocks(batch), kThreads, 0, s>>>(logits, y, batch, classes, delta,
                                                               loss);
}

}  // namespace hetps::cuda
