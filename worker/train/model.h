// Models of the training workload: a feed-forward network described as a list of layers
// (linear, 2-D convolution, ReLU, max pooling) ending in a softmax cross-entropy loss, with a
// CPU implementation on Eigen (the reference) and a CUDA one on cuBLAS plus own kernels.
//
// Each layer with parameters owns two tensors, "<kind><p>.w" and "<kind><p>.b" (kind fc or conv,
// p its index among the parameterised layers, also its layer index in the shard map), so
// per-layer features of the parameter server have something to act on. Parameters live outside
// the model, one float buffer per tensor in Tensors() order, so they can be pulled into and
// pushed from directly. A Model keeps scratch buffers: one per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/shard_map.h"
#include "common/status.h"

namespace hetps {

using Params = std::vector<std::vector<float>>;

struct LayerSpec {
  enum class Kind { kLinear, kConv, kRelu, kMaxPool };
  Kind kind;
  int out = 0;     // linear: outputs; conv: output channels
  int kernel = 0;  // conv: square kernel size (stride 1); max pool: window = stride
  int pad = 0;     // conv: zero padding on each side
};

struct Shape {
  int c = 1, h = 1, w = 1;  // channels, height, width; a flat vector is {n, 1, 1}
  int64_t size() const { return static_cast<int64_t>(c) * h * w; }
};

// A layer list resolved against an input shape: every layer's input shape and parameters.
struct Architecture {
  Shape input;
  int classes = 0;
  std::vector<LayerSpec> layers;
  std::vector<Shape> shapes;  // shapes[i]: input of layer i; shapes.back(): the logits
  std::vector<int>
      weight_tensor;  // per layer: index of its weight in tensors (bias follows), or -1
  std::vector<TensorSpec> tensors;
};

// Checks that the layers fit the input (positive sizes, windows inside the image) and that the
// last one produces `classes` outputs.
StatusOr<Architecture> Resolve(Shape input, int classes, std::vector<LayerSpec> layers);

// in -> hidden... -> classes with ReLU between.
std::vector<LayerSpec> MlpLayers(const std::vector<int>& hidden, int classes);
// LeNet-5 style: conv 5x5 (6, padded) -> pool 2 -> conv 5x5 (16) -> pool 2 -> 120 -> 84 -> classes.
std::vector<LayerSpec> LeNetLayers(int classes);
// "mlp" or "cnn" for images of `input` shape.
StatusOr<Architecture> BuildArchitecture(const std::string& model, Shape input, int classes,
                                         const std::vector<int>& hidden);

// Device-resident training, for models with a device of their own (the CUDA model): the
// parameters are uploaded to the device as their pulls complete, and the gradients stay there
// to be encoded there (worker/train/gradient_encoders.h).
class DeviceTraining {
 public:
  virtual ~DeviceTraining() = default;
  // Page-locks the host buffers of `params`, so that pulls land in memory the device copies
  // from directly and asynchronously. Undone by Unpin or the model's destruction; `params`
  // must not be resized or freed in between.
  virtual Status Pin(Params& params) = 0;
  virtual void Unpin() = 0;
  // Starts copying tensor t's values from `host` to the device; the device work that follows
  // waits for it. `host` must not change until the next Step returns.
  virtual Status Upload(size_t t, const float* host) = 0;
  // Mean cross-entropy of the batch with the uploaded parameters; the gradients stay on the
  // device, where Gradient(t) finds them until the next Step.
  virtual StatusOr<double> Step(const float* x, const int32_t* y, int64_t batch) = 0;
  virtual const float* Gradient(size_t t) const = 0;  // device memory
  // The layer-wise schedule (hetps/layer_accumulator.h) on the device: not `due`, tensor t's
  // gradient is added to its device accumulator; due, the accumulator is added into the
  // gradient, which is then multiplied by `scale` (1 / steps for a mean), and cleared; the
  // gradient is then complete for readers on any stream (the device codecs have their own).
  virtual Status Accumulate(size_t t, bool due, float scale) = 0;
  // Squared L2 norms of tensor t's gradient and uploaded values (waits for the device).
  virtual StatusOr<std::pair<double, double>> Norms(size_t t) = 0;
};

class Model {
 public:
  explicit Model(Architecture arch) : arch_(std::move(arch)) {}
  virtual ~Model() = default;

  const Architecture& arch() const { return arch_; }
  const std::vector<TensorSpec>& Tensors() const { return arch_.tensors; }
  // He-initialized weights (normal, fan-in), zero biases; seeded.
  Params Init(uint64_t seed) const;
  Params Zeros() const;
  virtual std::string device() const = 0;

  // Mean cross-entropy of the batch; fills `grads` (same layout as params) with its gradient.
  // x: batch x input.size() row-major; y: labels in [0, classes).
  virtual StatusOr<double> LossAndGradients(const Params& params, const float* x, const int32_t* y,
                                            int64_t batch, Params& grads) = 0;
  // Predicted class of each of n samples.
  virtual Status Predict(const Params& params, const float* x, int64_t n, int32_t* out) = 0;
  // Device-resident training, or nullptr when the model computes in host memory.
  virtual DeviceTraining* device_training() { return nullptr; }
  // Fraction of n samples classified correctly.
  StatusOr<double> Accuracy(const Params& params, const float* x, const int32_t* y, int64_t n);

 private:
  Architecture arch_;
};

std::unique_ptr<Model> MakeCpuModel(Architecture arch);

// Whether this build has the CUDA path and a GPU it can use; `why` says otherwise.
bool CudaUsable(std::string* why);
// The CUDA model on device 0; fails when !CudaUsable.
// On GPU local_rank mod the visible devices (CUDA_VISIBLE_DEVICES respected).
StatusOr<std::unique_ptr<Model>> MakeCudaModel(Architecture arch, int local_rank = 0);
// The GPU a worker of this local rank uses among `devices` visible ones.
inline int DeviceForLocalRank(int local_rank, int devices) {
  return devices > 0 ? (local_rank < 0 ? 0 : local_rank % devices) : 0;
}

// device: "cpu", "cuda" or "auto" (the GPU when usable). Logs one line saying which.
StatusOr<std::unique_ptr<Model>> MakeModel(Architecture arch, const std::string& device,
                                           int local_rank = 0);

// Threads the CPU path may use (OpenMP over samples, Eigen's products); default 1, since a
// local cluster already runs one process per core or more.
void SetComputeThreads(int threads);

}  // namespace hetps
