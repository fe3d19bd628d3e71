// The model's own CUDA kernels (everything that is not a cuBLAS product), launched on a given
// stream. Each has a CPU counterpart in cpu_model.cc / softmax.h, which is its reference.
// Plain C++ interface so that host code compiles without nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hetps::cuda {

struct Geometry {
  int c, h, w;     // input image
  int oc, oh, ow;  // output image
  int k, pad;      // square window (conv: stride 1; pool: stride k), zero padding
};

// out[n][c][j] += bias[c] for `batch` samples of channels x inner.
void AddBias(cudaStream_t s, float* out, const float* bias, int64_t batch, int channels,
             int64_t inner);
// grad[c] = sum over samples n and positions j of delta[n][c][j].
void ChannelSum(cudaStream_t s, const float* delta, int64_t batch, int channels, int64_t inner,
                float* grad);
void Relu(cudaStream_t s, const float* in, float* out, int64_t n);
// delta[i] = 0 where out[i] <= 0.
void ReluBackward(cudaStream_t s, const float* out, float* delta, int64_t n);
// col[n]: c*k*k rows x oh*ow columns of image n, zero outside the image.
void Im2Col(cudaStream_t s, const float* in, const Geometry& g, int64_t batch, float* col);
// The adjoint: in[n][c][y][x] = sum of the col[n] entries copied from that pixel.
void Col2Im(cudaStream_t s, const float* col, const Geometry& g, int64_t batch, float* in);
// Non-overlapping k x k max pooling; arg gets each output's input index within its sample.
void MaxPool(cudaStream_t s, const float* in, const Geometry& g, int64_t batch, float* out,
             int32_t* arg);
// in (zeroed here) gets each output's delta at its argmax.
void MaxPoolBackward(cudaStream_t s, const float* delta, const int32_t* arg, const Geometry& g,
                     int64_t batch, float* in);
// loss[n] = -log softmax(logits[n])[y[n]]; delta = (softmax - onehot) / batch.
void SoftmaxCrossEntropy(cudaStream_t s, const float* logits, const int32_t* y, int64_t batch,
                         int classes, float* delta, float* loss);

}  // namespace hetps::cuda
