// The GPU codecs' host side (compiled when nvcc exists): buffers, the error-feedback steps and
// the pinned hand-over of encoded bytes; the arithmetic is in codec_kernels.cu.
#include "worker/compress/gpu_codec.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/compress/dgc.h"
#include "common/compress/qsgd.h"
#include "common/compress/util.h"
#include "worker/compress/cuda/codec_kernels.h"

namespace hetps::compress::gpu {
namespace {

Status CudaStatus(cudaError_t e, const char* what) {
  return e == cudaSuccess
             ? Status()
             : Status::Internal(fmt::format("CUDA {}: {}", what, cudaGetErrorString(e)));
}

#define HETPS_CUDA(call)                                            \
  do {                                                              \
    if (Status s_ = CudaStatus((call), #call); !s_.ok()) return s_; \
  } while (0)

// A device (or pinned host) allocation that grows.
template <bool kPinned>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Release(); }
  cudaError_t Reserve(size_t bytes) {
    if (bytes <= size_) return cudaSuccess;
    Release();
    cudaError_t e = kPinned ? cudaMallocHost(&p_, std::max<size_t>(bytes, 1))
                            : cudaMalloc(&p_, std::max<size_t>(bytes, 1));
    if (e == cudaSuccess) {
      size_ = bytes;
    } else {
      p_ = nullptr;
    }
    return e;
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }

 private:
  void Release() {
    if (p_) (void)(kPinned ? cudaFreeHost(p_) : cudaFree(p_));
    p_ = nullptr;
    size_ = 0;
  }
  void* p_ = nullptr;
  size_t size_ = 0;
};

class CudaEncoder : public Encoder {
 public:
  CudaEncoder(CodecSpec spec, std::shared_ptr<const Codec> cpu, int64_t n)
      : spec_(std::move(spec)), cpu_(std::move(cpu)), n_(n) {}
  ~CudaEncoder() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Open() {
    HETPS_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    const size_t floats = static_cast<size_t>(n_) * sizeof(float);
    HETPS_CUDA(input_.Reserve(floats));
    HETPS_CUDA(p_.Reserve(floats));
    HETPS_CUDA(decoded_.Reserve(floats));
    HETPS_CUDA(
        sums_.Reserve(sizeof(double) * (cuda::kSums * ((n_ + kSumChunk - 1) / kSumChunk + 1))));
    if (spec_.name == "topk") HETPS_CUDA(scratch_.Reserve(cuda::TopKScratchBytes(n_)));
    if (spec_.name == "terngrad") {
      HETPS_CUDA(scratch_.Reserve(sizeof(float) * cuda::kTernGradScratch));
    }
    if (spec_.name == "dgc") {  // the codec's own state, u and v, starts at zero
      HETPS_CUDA(scratch_.Reserve(cuda::DgcScratchBytes(n_)));
      HETPS_CUDA(u_.Reserve(floats));
      HETPS_CUDA(v_.Reserve(floats));
      HETPS_CUDA(cudaMemsetAsync(u_.get(), 0, floats, stream_));
      HETPS_CUDA(cudaMemsetAsync(v_.get(), 0, floats, stream_));
      HETPS_CUDA(sample_.Reserve(sizeof(float) * DgcSampling(n_, Param("sample")).count));
      HETPS_CUDA(counts_.Reserve(sizeof(unsigned long long) + sizeof(int)));
    }
    if (spec_.ef) {
      HETPS_CUDA(residual_.Reserve(floats));
      HETPS_CUDA(cudaMemsetAsync(residual_.get(), 0, floats, stream_));
    }
    return Status();
  }

  Status EncodeDevice(const float* g, const CodecContext& ctx, std::vector<uint8_t>& out) override {
    const float* p = g;
    if (spec_.ef) {  // p = g + e
      cuda::Add(stream_, g, residual_.get<float>(), n_, p_.get<float>());
      p = p_.get<float>();
    }
    const int64_t most = MaxEncodedBytes(ctx);
    HETPS_CUDA(encoded_.Reserve(most));
    HETPS_CUDA(pinned_.Reserve(most));
    auto encoded = EncodeOn(p, ctx, encoded_.get<uint8_t>());
    if (!encoded.ok()) return encoded.status();
    const int64_t bytes = *encoded;
    if (spec_.ef) {  // e = p - D(m), on the device
      if (Status s = DecodeOn(encoded_.get<uint8_t>(), bytes, ctx, decoded_.get<float>());
          !s.ok()) {
        return s;
      }
      cuda::Subtract(stream_, p, decoded_.get<float>(), n_, residual_.get<float>());
    }
    HETPS_CUDA(
        cudaMemcpyAsync(pinned_.get(), encoded_.get(), bytes, cudaMemcpyDeviceToHost, stream_));
    HETPS_CUDA(cudaStreamSynchronize(stream_));
    HETPS_CUDA(cudaGetLastError());
    out.resize(bytes);
    std::memcpy(out.data(), pinned_.get(), bytes);
    return Status();
  }

  Status Encode(const float* host_g, const CodecContext& ctx, std::vector<uint8_t>& out) override {
    HETPS_CUDA(
        cudaMemcpyAsync(input_.get(), host_g, n_ * sizeof(float), cudaMemcpyHostToDevice, stream_));
    return EncodeDevice(input_.get<float>(), ctx, out);
  }

  Status Decode(const std::vector<uint8_t>& in, const CodecContext& ctx, float* out) override {
    HETPS_CUDA(encoded_.Reserve(in.size()));
    HETPS_CUDA(
        cudaMemcpyAsync(encoded_.get(), in.data(), in.size(), cudaMemcpyHostToDevice, stream_));
    if (Status s = DecodeOn(encoded_.get<uint8_t>(), static_cast<int64_t>(in.size()), ctx,
                            decoded_.get<float>());
        !s.ok()) {
      return s;
    }
    HETPS_CUDA(
        cudaMemcpyAsync(out, decoded_.get(), n_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    HETPS_CUDA(cudaStreamSynchronize(stream_));
    return CudaStatus(cudaGetLastError(), "decode");
  }

  StatusOr<std::vector<float>> Residual() override {
    std::vector<float> r;
    if (!spec_.ef) return r;
    r.resize(n_);
    HETPS_CUDA(cudaMemcpyAsync(r.data(), residual_.get(), n_ * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    HETPS_CUDA(cudaStreamSynchronize(stream_));
    return r;
  }

  StatusOr<std::vector<float>> Unsent() override {
    std::vector<float> v;
    if (spec_.name != "dgc") return v;
    v.resize(n_);
    HETPS_CUDA(
        cudaMemcpyAsync(v.data(), v_.get(), n_ * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    HETPS_CUDA(cudaStreamSynchronize(stream_));
    return v;
  }

  // The most bytes an encoding can take (dgc's depend on the data: at most every element).
  int64_t MaxEncodedBytes(const CodecContext& ctx) const {
    return spec_.name == "dgc" ? 4 + 8 * n_ : cpu_->EncodedBytes(n_, ctx);
  }

  // Device-to-device: encode x into out (MaxEncodedBytes long), without error feedback;
  // returns the encoding's size.
  StatusOr<int64_t> EncodeOn(const float* x, const CodecContext& ctx, uint8_t* out) {
    const std::string& name = spec_.name;
    RngKey key = ctx.key;
    key.seed = static_cast<uint64_t>(Param("seed"));
    double* chunks = sums_.get<double>() + cuda::kSums;
    double* sums = sums_.get<double>();
    if (name == "none") {
      HETPS_CUDA(cudaMemcpyAsync(out, x, n_ * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    } else if (name == "fp16") {
      cuda::Fp16Encode(stream_, x, n_, out);
    } else if (name == "randomk") {
      const int64_t k = KeepCount(n_, Param("density"));
      const float scale =
          Param("unbiased") == 1 ? static_cast<float>(n_) / static_cast<float>(k) : 1.0f;
      cuda::RandomKEncode(stream_, x, n_, k, key, scale, out);
    } else if (name == "qsgd") {
      const auto levels = static_cast<uint32_t>(Param("levels"));
      cuda::FixedOrderSums(stream_, x, n_, chunks, sums);
      cuda::QsgdEncode(stream_, x, n_, sums, levels, QsgdWidth(levels), key, out);
    } else if (name == "onebit" || name == "efsign") {
      cuda::FixedOrderSums(stream_, x, n_, chunks, sums);
      (name == "onebit" ? cuda::OneBitEncode : cuda::EfSignEncode)(stream_, x, n_, sums, out);
    } else if (name == "topk") {
      const int64_t k = KeepCount(n_, Param("density"));
      HETPS_CUDA(cuda::TopKEncode(stream_, x, n_, k, scratch_.get(), out));
    } else if (name == "terngrad") {
      cuda::FixedOrderSums(stream_, x, n_, chunks, sums);
      cuda::TernGradEncode(stream_, x, n_, sums, key, scratch_.get<float>(), out);
    } else if (name == "dgc") {
      return DgcEncodeOn(x, ctx, out);
    } else {
      return Status::InvalidArgument(fmt::format("codec '{}' has no CUDA kernels", name));
    }
    HETPS_CUDA(cudaGetLastError());
    return cpu_->EncodedBytes(n_, ctx);
  }

  // dgc: accumulate on the device; the density, the sample's threshold and its re-adjustment
  // on the host by the CPU codec's own rules (dgc.h), counting on the device; then select.
  StatusOr<int64_t> DgcEncodeOn(const float* g, const CodecContext& ctx, uint8_t* out) {
    auto* u = u_.get<float>();
    auto* v = v_.get<float>();
    cuda::DgcAccumulate(stream_, g, n_, static_cast<float>(Param("momentum")), u, v);
    const int64_t k =
        KeepCount(n_, DgcDensity(Param("density"), static_cast<int64_t>(Param("warmup")),
                                 static_cast<int64_t>(Param("epoch")), ctx.key.step));
    const DgcSample sampling = DgcSampling(n_, Param("sample"));
    std::vector<float> sample(sampling.count);
    cuda::DgcSampleMagnitudes(stream_, v, sampling.count, sampling.stride, sample_.get<float>());
    HETPS_CUDA(cudaMemcpyAsync(sample.data(), sample_.get(), sample.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    HETPS_CUDA(cudaStreamSynchronize(stream_));
    auto* passed = counts_.get<unsigned long long>();
    cudaError_t failed = cudaSuccess;
    const float threshold =
        DgcAdjustThreshold(DgcFirstThreshold(sample, k, n_), k, [&](float t) -> int64_t {
          if (failed != cudaSuccess) return k;  // inside the band: stops the re-adjustment
          unsigned long long count = 0;
          cuda::DgcCount(stream_, v, n_, t, passed);
          failed = cudaMemcpyAsync(&count, passed, sizeof(count), cudaMemcpyDeviceToHost, stream_);
          if (failed == cudaSuccess) failed = cudaStreamSynchronize(stream_);
          return failed == cudaSuccess ? static_cast<int64_t>(count) : k;
        });
    HETPS_CUDA(failed);
    auto* count_on_device = reinterpret_cast<int*>(passed + 1);
    HETPS_CUDA(cuda::DgcSelect(stream_, v, u, n_, threshold, scratch_.get(), out, count_on_device));
    int count = 0;
    HETPS_CUDA(
        cudaMemcpyAsync(&count, count_on_device, sizeof(count), cudaMemcpyDeviceToHost, stream_));
    HETPS_CUDA(cudaStreamSynchronize(stream_));
    return 4 + 8 * static_cast<int64_t>(count);
  }

  // Decodes `bytes` bytes at device pointer `in` (an encoding of this codec) into out.
  Status DecodeOn(const uint8_t* in, int64_t bytes, const CodecContext& ctx, float* out) {
    const std::string& name = spec_.name;
    RngKey key = ctx.key;
    key.seed = static_cast<uint64_t>(Param("seed"));
    if (name == "none") {
      HETPS_CUDA(cudaMemcpyAsync(out, in, n_ * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    } else if (name == "fp16") {
      cuda::Fp16Decode(stream_, in, n_, out);
    } else if (name == "randomk") {
      cuda::RandomKDecode(stream_, in, n_, KeepCount(n_, Param("density")), key, out);
    } else if (name == "qsgd") {
      const auto levels = static_cast<uint32_t>(Param("levels"));
      cuda::QsgdDecode(stream_, in, n_, levels, QsgdWidth(levels), out);
    } else if (name == "onebit" || name == "efsign") {
      cuda::SignDecode(stream_, in, n_, name == "onebit" ? 2 : 1, out);
    } else if (name == "topk") {
      cuda::SparseDecode(stream_, in, n_, KeepCount(n_, Param("density")), out);
    } else if (name == "terngrad") {
      cuda::TernGradDecode(stream_, in, n_, out);
    } else if (name == "dgc") {
      if (bytes < 4 || (bytes - 4) % 8 != 0 || (bytes - 4) / 8 > n_) {
        return Status::SizeMismatch(
            fmt::format("dgc: {} bytes are no encoding of {} elements", bytes, n_));
      }
      cuda::SparseDecode(stream_, in + 4, n_, (bytes - 4) / 8, out);
    } else {
      return Status::InvalidArgument(fmt::format("codec '{}' has no CUDA kernels", name));
    }
    return CudaStatus(cudaGetLastError(), "decode");
  }

  cudaStream_t stream() const { return stream_; }
  const float* input() const { return input_.get<float>(); }
  uint8_t* encoded() const { return encoded_.get<uint8_t>(); }
  float* decoded() const { return decoded_.get<float>(); }

 private:
  double Param(const std::string& key) const { return cpu_->Param(key); }

  CodecSpec spec_;
  std::shared_ptr<const Codec> cpu_;  // sizes, and the reference
  int64_t n_;
  cudaStream_t stream_ = nullptr;
  Buffer<false> input_, p_, decoded_, residual_, encoded_, sums_, scratch_;
  Buffer<false> u_, v_, sample_, counts_;  // dgc's momentum and accumulation, its sample
  Buffer<true> pinned_;
};

}  // namespace

bool Usable(std::string* why) {
  int count = 0;  // left unwritten on some errors
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    if (why) {
      *why = e != cudaSuccess ? fmt::format("no usable GPU: {}", cudaGetErrorString(e))
                              : "no GPU present";
    }
    return false;
  }
  return true;
}

bool Supported(const std::string& codec) {
  return codec == "none" || codec == "fp16" || codec == "topk" || codec == "randomk" ||
         codec == "qsgd" || codec == "onebit" || codec == "efsign" || codec == "dgc" ||
         codec == "terngrad";
}

Status CopyToHost(const float* device, int64_t n, float* host) {
  return CudaStatus(
      cudaMemcpy(host, device, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost),
      "copy to host");
}

namespace {

class CudaFloats : public DeviceFloats {
 public:
  explicit CudaFloats(int64_t n) : n_(n) {}
  Status Open() { return CudaStatus(buffer_.Reserve(n_ * sizeof(float)), "allocate"); }
  Status CopyFrom(const float* host) override {
    return CudaStatus(cudaMemcpy(buffer_.get(), host, n_ * sizeof(float), cudaMemcpyHostToDevice),
                      "copy to device");
  }
  float* get() override { return buffer_.get<float>(); }

 private:
  int64_t n_;
  Buffer<false> buffer_;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceFloats>> DeviceFloats::Create(int64_t n) {
  std::string why;
  if (!Usable(&why)) return Status::FailedPrecondition(why);
  auto f = std::make_unique<CudaFloats>(n);
  if (Status s = f->Open(); !s.ok()) return s;
  return std::unique_ptr<DeviceFloats>(std::move(f));
}

StatusOr<std::unique_ptr<Encoder>> Encoder::Create(const CodecSpec& spec, int64_t n) {
  std::string why;
  if (!Usable(&why)) return Status::FailedPrecondition(why);
  if (!Supported(spec.name)) {
    return Status::InvalidArgument(fmt::format("codec '{}' has no CUDA kernels", spec.name));
  }
  auto cpu = MakeCodec(spec);
  if (!cpu.ok()) return cpu.status();
  auto e = std::make_unique<CudaEncoder>(spec, *cpu, n);
  if (Status s = e->Open(); !s.ok()) return s;
  return std::unique_ptr<Encoder>(std::move(e));
}

StatusOr<BenchResult> Benchmark(const CodecSpec& spec, const std::vector<float>& x,
                                const CodecContext& ctx, double seconds,
                                std::vector<uint8_t>& bytes) {
  CodecSpec plain = spec;
  plain.ef = false;
  auto made = Encoder::Create(plain, static_cast<int64_t>(x.size()));
  if (!made.ok()) return made.status();
  auto& e = static_cast<CudaEncoder&>(**made);
  HETPS_CUDA(cudaMemcpy(const_cast<float*>(e.input()), x.data(), x.size() * sizeof(float),
                        cudaMemcpyHostToDevice));
  using Clock = std::chrono::steady_clock;
  auto median = [&](auto op) -> StatusOr<double> {
    std::vector<double> t;
    const auto start = Clock::now();
    while (t.size() < 5 || (std::chrono::duration<double>(Clock::now() - start).count() < seconds &&
                            t.size() < 1000)) {
      const auto t0 = Clock::now();
      if (Status s = op(); !s.ok()) return s;
      t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  };
  BenchResult r;
  auto enc = median([&] { return e.EncodeDevice(e.input(), ctx, bytes); });
  if (!enc.ok()) return enc.status();
  r.encode_s = *enc;
  int64_t encoded_bytes = static_cast<int64_t>(bytes.size());
  auto on_device = median([&]() -> Status {
    auto encoded = e.EncodeOn(e.input(), ctx, e.encoded());
    if (!encoded.ok()) return encoded.status();
    encoded_bytes = *encoded;
    return CudaStatus(cudaStreamSynchronize(e.stream()), "encode");
  });
  if (!on_device.ok()) return on_device.status();
  r.encode_device_s = *on_device;
  auto copy = median([&]() -> Status {
    HETPS_CUDA(cudaMemcpyAsync(e.decoded(), e.input(), x.size() * sizeof(float),
                               cudaMemcpyDeviceToDevice, e.stream()));
    return CudaStatus(cudaStreamSynchronize(e.stream()), "copy");
  });
  if (!copy.ok()) return copy.status();
  r.copy_s = *copy;
  auto dec = median([&]() -> Status {
    if (Status s = e.DecodeOn(e.encoded(), encoded_bytes, ctx, e.decoded()); !s.ok()) return s;
    return CudaStatus(cudaStreamSynchronize(e.stream()), "decode");
  });
  if (!dec.ok()) return dec.status();
  r.decode_s = *dec;
  return r;
}

}  // namespace hetps::compress::gpu
