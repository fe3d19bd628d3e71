// The CUDA model (compiled when nvcc exists): dense products and convolutions (im2col +
// strided-batched products) on cuBLAS, the element-wise layers, pooling, im2col/col2im, bias and
// loss as own kernels. The CPU model (cpu_model.cc) is its reference;
// tests/unit/worker/train/model_test.cc compares them.
//
// Everything runs on one stream; parameters and the batch are copied in, gradients out, per
// call. Activations stay on the device between forward and backward.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "worker/compress/gpu_codec.h"
#include "worker/train/cuda_kernels.h"
#include "worker/train/model.h"

namespace hetps {
namespace {

using Kind = LayerSpec::Kind;
using cuda::Geometry;

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() { cudaFree(p_); }
  // Grows to at least n elements (contents not kept).
  cudaError_t Reserve(int64_t n) {
    if (n <= n_) return cudaSuccess;
    cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
    cudaError_t e = cudaMalloc(&p_, std::max<int64_t>(n, 1) * sizeof(T));
    if (e == cudaSuccess) n_ = n;
    return e;
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  int64_t n_ = 0;
};

Status CudaError(cudaError_t e, const char* what) {
  return Status::Internal(fmt::format("CUDA {}: {}", what, cudaGetErrorString(e)));
}

#define HETPS_CUDA(call)                                                         \
  do {                                                                           \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) return CudaError(e_, #call); \
  } while (0)
#define HETPS_CUBLAS(call)                                                                       \
  do {                                                                                           \
    if (cublasStatus_t e_ = (call); e_ != CUBLAS_STATUS_SUCCESS) {                               \
      return Status::Internal(fmt::format("cuBLAS {}: status {}", #call, static_cast<int>(e_))); \
    }                                                                                            \
  } while (0)
#define HETPS_LAUNCHED() HETPS_CUDA(cudaGetLastError())

// cuBLAS is opened when the first CUDA model is made, not at program start: loaded, it and its
// cuBLASLt cost a process about 150 MB of memory, which every worker linking them would pay,
// GPU or not (a hundred edge clients on one machine use none). Only these entry points are used.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  decltype(&cublasSaxpy_v2) saxpy = nullptr;
  decltype(&cublasSscal_v2) sscal = nullptr;
  decltype(&cublasSdot_v2) sdot = nullptr;
};

#define HETPS_STR2(x) #x
#define HETPS_STR(x) HETPS_STR2(x)

StatusOr<const Cublas*> LoadCublas() {
  static StatusOr<Cublas> loaded = []() -> StatusOr<Cublas> {
    // The soname of the toolkit built against, found on the executable's run path, else in the
    // toolkit's folder.
    const std::string soname = "libcublas.so." HETPS_STR(CUBLAS_VER_MAJOR);
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      lib = dlopen((std::string(HETPS_CUDA_LIBRARY_DIR) + "/" + soname).c_str(),
                   RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == nullptr) {
      return Status::FailedPrecondition(fmt::format("cannot load {}: {}", soname, dlerror()));
    }
    Cublas c;
    bool all = true;
    auto bind = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      all = all && fn != nullptr;
    };
    bind(c.create, "cublasCreate_v2");
    bind(c.destroy, "cublasDestroy_v2");
    bind(c.set_stream, "cublasSetStream_v2");
    bind(c.sgemm, "cublasSgemm_v2");
    bind(c.sgemm_strided_batched, "cublasSgemmStridedBatched");
    bind(c.saxpy, "cublasSaxpy_v2");
    bind(c.sscal, "cublasSscal_v2");
    bind(c.sdot, "cublasSdot_v2");
    if (!all) return Status::FailedPrecondition(soname + " lacks an entry point hetps uses");
    return c;
  }();
  if (!loaded.ok()) return loaded.status();
  return &*loaded;
}

// Row-major C (m x n) = alpha op(A) op(B) + beta C, as cuBLAS's column-major C^T = op(B)^T op(A)^T.
cublasStatus_t Gemm(const Cublas& blas, cublasHandle_t h, bool ta, bool tb, int m, int n, int k,
                    const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                    float beta = 0.0f) {
  const float alpha = 1.0f;
  return blas.sgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                    &alpha, b, ldb, a, lda, &beta, c, ldc);
}

// The same for `count` independent products with the given element strides (0: shared).
cublasStatus_t GemmBatched(const Cublas& blas, cublasHandle_t h, bool ta, bool tb, int m, int n,
                           int k, const float* a, int lda, int64_t stride_a, const float* b,
                           int ldb, int64_t stride_b, float* c, int ldc, int64_t stride_c,
                           int count) {
  const float alpha = 1.0f, beta = 0.0f;
  return blas.sgemm_strided_batched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                                    stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, count);
}

Geometry GeometryOf(const Shape& s, const Shape& o, const LayerSpec& l) {
  return {s.c, s.h, s.w, o.c, o.h, o.w, l.kernel, l.pad};
}

class CudaModel : public Model, public DeviceTraining {
 public:
  CudaModel(Architecture a, int device, std::string name)
      : Model(std::move(a)), device_(device), name_(std::move(name)) {}

  ~CudaModel() override {
    Unpin();
    if (blas_) cublas_->destroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Open() {
    HETPS_CUDA(cudaSetDevice(device_));
    HETPS_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    auto cublas = LoadCublas();
    if (!cublas.ok()) return cublas.status();
    cublas_ = *cublas;
    HETPS_CUBLAS(cublas_->create(&blas_));
    HETPS_CUBLAS(cublas_->set_stream(blas_, stream_));
    const Architecture& a = arch();
    params_.resize(a.tensors.size());
    grads_.resize(a.tensors.size());
    for (size_t t = 0; t < a.tensors.size(); ++t) {
      HETPS_CUDA(params_[t].Reserve(a.tensors[t].NumElements()));
      HETPS_CUDA(grads_[t].Reserve(a.tensors[t].NumElements()));
    }
    act_.resize(a.layers.size() + 1);
    argmax_.resize(a.layers.size());
    return Status();
  }

  std::string device() const override { return name_; }
  DeviceTraining* device_training() override { return this; }

  Status Pin(Params& params) override {
    Unpin();
    for (std::vector<float>& p : params) {
      if (p.empty()) continue;
      HETPS_CUDA(cudaHostRegister(p.data(), p.size() * sizeof(float), cudaHostRegisterDefault));
      pinned_.push_back(p.data());
    }
    return Status();
  }

  void Unpin() override {
    for (void* p : pinned_) (void)cudaHostUnregister(p);
    pinned_.clear();
  }

  Status Upload(size_t t, const float* host) override {
    if (t >= params_.size()) return Status::InvalidArgument(fmt::format("no tensor {}", t));
    HETPS_CUDA(cudaSetDevice(device_));
    HETPS_CUDA(cudaMemcpyAsync(params_[t].get(), host,
                               arch().tensors[t].NumElements() * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
    return Status();
  }

  const float* Gradient(size_t t) const override { return grads_[t].get(); }

  Status Accumulate(size_t t, bool due, float scale) override {
    if (t >= grads_.size()) return Status::InvalidArgument(fmt::format("no tensor {}", t));
    const auto n = static_cast<int>(arch().tensors[t].NumElements());
    HETPS_CUDA(cudaSetDevice(device_));
    if (sums_.size() < grads_.size()) sums_.resize(grads_.size());
    const float one = 1.0f;
    if (!due) {
      if (sums_[t].get() == nullptr) {
        HETPS_CUDA(sums_[t].Reserve(n));
        HETPS_CUDA(cudaMemsetAsync(sums_[t].get(), 0, n * sizeof(float), stream_));
      }
      HETPS_CUBLAS(cublas_->saxpy(blas_, n, &one, grads_[t].get(), 1, sums_[t].get(), 1));
      return Status();
    }
    if (sums_[t].get() != nullptr) {
      HETPS_CUBLAS(cublas_->saxpy(blas_, n, &one, sums_[t].get(), 1, grads_[t].get(), 1));
      HETPS_CUDA(cudaMemsetAsync(sums_[t].get(), 0, n * sizeof(float), stream_));
    }
    if (scale != 1.0f) HETPS_CUBLAS(cublas_->sscal(blas_, n, &scale, grads_[t].get(), 1));
    // The encoders read the gradient on their own non-blocking streams, which do not wait for
    // this one: without the wait a push could carry the gradient before the sum was added.
    HETPS_CUDA(cudaStreamSynchronize(stream_));
    return Status();
  }

  StatusOr<std::pair<double, double>> Norms(size_t t) override {
    if (t >= grads_.size()) return Status::InvalidArgument(fmt::format("no tensor {}", t));
    const auto n = static_cast<int>(arch().tensors[t].NumElements());
    HETPS_CUDA(cudaSetDevice(device_));
    float g = 0, w = 0;  // host results: cuBLAS waits for the stream
    HETPS_CUBLAS(cublas_->sdot(blas_, n, grads_[t].get(), 1, grads_[t].get(), 1, &g));
    HETPS_CUBLAS(cublas_->sdot(blas_, n, params_[t].get(), 1, params_[t].get(), 1, &w));
    return std::make_pair(static_cast<double>(g), static_cast<double>(w));
  }

  StatusOr<double> LossAndGradients(const Params& params, const float* x, const int32_t* y,
                                    int64_t batch, Params& grads) override {
    if (Status s = UploadAll(params); !s.ok()) return s;
    auto loss = Step(x, y, batch);
    if (!loss.ok()) return loss.status();
    for (size_t t = 0; t < arch().tensors.size(); ++t) {
      HETPS_CUDA(cudaMemcpyAsync(grads[t].data(), grads_[t].get(), grads[t].size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
    }
    HETPS_CUDA(cudaStreamSynchronize(stream_));
    return *loss;
  }

  StatusOr<double> Step(const float* x, const int32_t* y, int64_t batch) override {
    const Architecture& a = arch();
    if (Status s = Forward(x, batch); !s.ok()) return s;
    HETPS_CUDA(labels_.Reserve(batch));
    HETPS_CUDA(loss_.Reserve(batch));
    HETPS_CUDA(delta_[0].Reserve(batch * a.classes));
    HETPS_CUDA(cudaMemcpyAsync(labels_.get(), y, batch * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream_));
    cuda::SoftmaxCrossEntropy(stream_, act_.back().get(), labels_.get(), batch, a.classes,
                              delta_[0].get(), loss_.get());
    HETPS_LAUNCHED();
    int current = 0;  // delta_[current] holds d loss / d output of the layer being undone
    for (size_t i = a.layers.size(); i-- > 0;) {
      if (Status s = Backward(i, batch, current, i > 0); !s.ok()) return s;
    }
    std::vector<float> losses(batch);
    HETPS_CUDA(cudaMemcpyAsync(losses.data(), loss_.get(), batch * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    HETPS_CUDA(cudaStreamSynchronize(stream_));
    double sum = 0;
    for (float l : losses) sum += l;
    return sum / static_cast<double>(batch);
  }

  Status Predict(const Params& params, const float* x, int64_t n, int32_t* out) override {
    constexpr int64_t kChunk = 4096;
    const int classes = arch().classes;
    std::vector<float> logits;
    if (Status s = UploadAll(params); !s.ok()) return s;
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t rows = std::min(kChunk, n - begin);
      if (Status s = Forward(x + begin * arch().input.size(), rows); !s.ok()) return s;
      logits.resize(rows * classes);
      HETPS_CUDA(cudaMemcpyAsync(logits.data(), act_.back().get(), logits.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
      HETPS_CUDA(cudaStreamSynchronize(stream_));
      for (int64_t i = 0; i < rows; ++i) {
        const float* r = logits.data() + i * classes;
        out[begin + i] = static_cast<int32_t>(std::max_element(r, r + classes) - r);
      }
    }
    return Status();
  }

 private:
  Status UploadAll(const Params& params) {
    for (size_t t = 0; t < arch().tensors.size(); ++t) {
      if (Status s = Upload(t, params[t].data()); !s.ok()) return s;
    }
    return Status();
  }

  // The layers' outputs for a batch, with the parameters on the device.
  Status Forward(const float* x, int64_t batch) {
    const Architecture& a = arch();
    HETPS_CUDA(cudaSetDevice(device_));
    for (size_t i = 0; i <= a.layers.size(); ++i)
      HETPS_CUDA(act_[i].Reserve(batch * a.shapes[i].size()));
    HETPS_CUDA(cudaMemcpyAsync(act_[0].get(), x, batch * a.input.size() * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
    for (size_t i = 0; i < a.layers.size(); ++i) {
      const LayerSpec& l = a.layers[i];
      const Shape& s = a.shapes[i];
      const Shape& o = a.shapes[i + 1];
      const float* in = act_[i].get();
      float* out = act_[i + 1].get();
      const int w = a.weight_tensor[i];
      switch (l.kind) {
        case Kind::kLinear:
          HETPS_CUBLAS(Gemm(*cublas_, blas_, false, true, batch, o.size(), s.size(), in, s.size(),
                            params_[w].get(), s.size(), out, o.size()));
          cuda::AddBias(stream_, out, params_[w + 1].get(), batch, o.size(), 1);
          HETPS_LAUNCHED();
          break;
        case Kind::kConv: {
          const Geometry g = GeometryOf(s, o, l);
          const int ckk = s.c * l.kernel * l.kernel, ohw = o.h * o.w;
          HETPS_CUDA(col_.Reserve(batch * ckk * ohw));
          cuda::Im2Col(stream_, in, g, batch, col_.get());
          HETPS_LAUNCHED();
          // out[n] (oc x ohw) = W (oc x ckk) col[n] (ckk x ohw)
          HETPS_CUBLAS(GemmBatched(*cublas_, blas_, false, false, o.c, ohw, ckk, params_[w].get(),
                                   ckk, 0, col_.get(), ohw, static_cast<int64_t>(ckk) * ohw, out,
                                   ohw, o.size(), batch));
          cuda::AddBias(stream_, out, params_[w + 1].get(), batch, o.c, ohw);
          HETPS_LAUNCHED();
          break;
        }
        case Kind::kRelu:
          cuda::Relu(stream_, in, out, batch * s.size());
          HETPS_LAUNCHED();
          break;
        case Kind::kMaxPool:
          HETPS_CUDA(argmax_[i].Reserve(batch * o.size()));
          cuda::MaxPool(stream_, in, GeometryOf(s, o, l), batch, out, argmax_[i].get());
          HETPS_LAUNCHED();
          break;
      }
    }
    return Status();
  }

  // delta_[current] (batch x output of layer i) becomes d loss / d input of layer i when
  // input_grad (possibly moving to the other delta buffer), after the parameter gradients.
  Status Backward(size_t i, int64_t batch, int& current, bool input_grad) {
    const Architecture& a = arch();
    const LayerSpec& l = a.layers[i];
    const Shape& s = a.shapes[i];
    const Shape& o = a.shapes[i + 1];
    const float* in = act_[i].get();
    const int w = a.weight_tensor[i];
    float* delta = delta_[current].get();
    DeviceBuffer<float>& next = delta_[1 - current];
    switch (l.kind) {
      case Kind::kLinear:
        // gW (out x in) = delta^T (out x batch) in (batch x in)
        HETPS_CUBLAS(Gemm(*cublas_, blas_, true, false, o.size(), s.size(), batch, delta, o.size(),
                          in, s.size(), grads_[w].get(), s.size()));
        cuda::ChannelSum(stream_, delta, batch, o.size(), 1, grads_[w + 1].get());
        HETPS_LAUNCHED();
        if (input_grad) {
          HETPS_CUDA(next.Reserve(batch * s.size()));
          // d in (batch x in) = delta (batch x out) W (out x in)
          HETPS_CUBLAS(Gemm(*cublas_, blas_, false, false, batch, s.size(), o.size(), delta,
                            o.size(), params_[w].get(), s.size(), next.get(), s.size()));
          current = 1 - current;
        }
        break;
      case Kind::kConv: {
        const Geometry g = GeometryOf(s, o, l);
        const int ckk = s.c * l.kernel * l.kernel, ohw = o.h * o.w;
        HETPS_CUDA(col_.Reserve(batch * ckk * ohw));
        cuda::Im2Col(stream_, in, g, batch, col_.get());
        HETPS_LAUNCHED();
        // gW (oc x ckk) = sum over n of delta[n] (oc x ohw) col[n]^T (ohw x ckk): every
        // sample's product in one strided-batched call, then their sum as one product with a
        // row of ones (two calls, where one per sample left the GPU idle between them).
        const int64_t wsize = static_cast<int64_t>(o.c) * ckk;
        HETPS_CUDA(per_sample_.Reserve(batch * wsize));
        if (Status s = Ones(batch); !s.ok()) return s;
        HETPS_CUBLAS(GemmBatched(*cublas_, blas_, false, true, o.c, ckk, ohw, delta, ohw, o.size(),
                                 col_.get(), ohw, static_cast<int64_t>(ckk) * ohw,
                                 per_sample_.get(), ckk, wsize, batch));
        HETPS_CUBLAS(Gemm(*cublas_, blas_, false, false, 1, wsize, batch, ones_.get(), batch,
                          per_sample_.get(), wsize, grads_[w].get(), wsize));
        cuda::ChannelSum(stream_, delta, batch, o.c, ohw, grads_[w + 1].get());
        HETPS_LAUNCHED();
        if (input_grad) {
          // dcol[n] (ckk x ohw) = W^T (ckk x oc) delta[n] (oc x ohw), reusing col_.
          HETPS_CUBLAS(GemmBatched(*cublas_, blas_, true, false, ckk, ohw, o.c, params_[w].get(),
                                   ckk, 0, delta, ohw, o.size(), col_.get(), ohw,
                                   static_cast<int64_t>(ckk) * ohw, batch));
          HETPS_CUDA(next.Reserve(batch * s.size()));
          cuda::Col2Im(stream_, col_.get(), g, batch, next.get());
          HETPS_LAUNCHED();
          current = 1 - current;
        }
        break;
      }
      case Kind::kRelu:
        if (input_grad) {
          cuda::ReluBackward(stream_, act_[i + 1].get(), delta, batch * s.size());
          HETPS_LAUNCHED();
        }
        break;
      case Kind::kMaxPool:
        if (input_grad) {
          HETPS_CUDA(next.Reserve(batch * s.size()));
          cuda::MaxPoolBackward(stream_, delta, argmax_[i].get(), GeometryOf(s, o, l), batch,
                                next.get());
          HETPS_LAUNCHED();
          current = 1 - current;
        }
        break;
    }
    return Status();
  }

  // ones_ holds at least n ones.
  Status Ones(int64_t n) {
    if (n <= ones_n_) return Status();
    HETPS_CUDA(ones_.Reserve(n));
    const std::vector<float> host(n, 1.0f);
    HETPS_CUDA(cudaMemcpy(ones_.get(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    ones_n_ = n;
    return Status();
  }

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  const Cublas* cublas_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<DeviceBuffer<float>> params_, grads_, act_;
  std::vector<DeviceBuffer<float>> sums_;  // the layer-wise schedule's accumulators (Accumulate)
  std::vector<void*> pinned_;              // host buffers page-locked by Pin
  std::vector<DeviceBuffer<int32_t>> argmax_;
  DeviceBuffer<float> delta_[2], col_, loss_, per_sample_, ones_;
  int64_t ones_n_ = 0;
  DeviceBuffer<int32_t> labels_;
};

}  // namespace

// One probe for every CUDA path of the worker.
bool CudaUsable(std::string* why) { return compress::gpu::Usable(why); }

StatusOr<std::unique_ptr<Model>> MakeCudaModel(Architecture arch, int local_rank) {
  std::string why;
  if (!CudaUsable(&why)) return Status::FailedPrecondition("--device=cuda: " + why);
  int devices = 0;
  HETPS_CUDA(cudaGetDeviceCount(&devices));
  const int device = DeviceForLocalRank(local_rank, devices);
  cudaDeviceProp prop{};
  HETPS_CUDA(cudaGetDeviceProperties(&prop, device));
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  spdlog::info("local rank {} takes GPU {} of the {} visible{}", local_rank, device, devices,
               visible != nullptr ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", visible) : "");
  auto m = std::make_unique<CudaModel>(
      std::move(arch), device,
      fmt::format("cuda:{} ({})", device, static_cast<const char*>(prop.name)));
  if (Status s = m->Open(); !s.ok()) return s;
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace hetps
