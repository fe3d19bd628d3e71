// Gradient compression on the GPU: CUDA twins of the CPU codecs in common/compress (fp16, topk,
// randomk, qsgd, onebit, efsign, terngrad, dgc; none is a copy; powersgd has none) with the
// error-feedback residual, and dgc's own state, kept on the device. Gradients are device pointers;
// only the encoded bytes cross to the host, through a pinned buffer. Encodings are byte-identical
// to the CPU codec's for the same input and context (deterministic codecs by construction;
// stochastic ones draw the same Philox numbers), so servers decode them with the CPU codecs. Builds
// without CUDA: then nothing is usable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/compress/codec.h"
#include "common/status.h"

namespace hetps::compress::gpu {

// Whether this build has the kernels and a GPU to run them on; `why` says otherwise.
bool Usable(std::string* why);
// Codecs with CUDA kernels.
bool Supported(const std::string& codec);
// Copies n floats from device memory to host memory (synchronous).
Status CopyToHost(const float* device, int64_t n, float* host);

// n floats of device memory, for tests and benchmarks to put gradients there.
class DeviceFloats {
 public:
  static StatusOr<std::unique_ptr<DeviceFloats>> Create(int64_t n);
  virtual ~DeviceFloats() = default;
  virtual Status CopyFrom(const float* host) = 0;  // n floats, synchronous
  virtual float* get() = 0;
};

class Encoder {
 public:
  // REQUIRES: Usable() and Supported(spec.name). Allocates the residual (zeros) when spec.ef.
  static StatusOr<std::unique_ptr<Encoder>> Create(const CodecSpec& spec, int64_t n);
  virtual ~Encoder() = default;
  // Encodes the n floats at device pointer `g` (plus the residual when ef; the residual is
  // updated to p - D(m) on the device) into `out`.
  virtual Status EncodeDevice(const float* g, const CodecContext& ctx,
                              std::vector<uint8_t>& out) = 0;
  // The same from host memory (copied in first).
  virtual Status Encode(const float* host_g, const CodecContext& ctx,
                        std::vector<uint8_t>& out) = 0;
  // Decodes on the device into host `out` (n floats).
  virtual Status Decode(const std::vector<uint8_t>& in, const CodecContext& ctx, float* out) = 0;
  // The residual, copied to the host (empty without ef).
  virtual StatusOr<std::vector<float>> Residual() = 0;
  // The codec's own unsent accumulation (dgc's v), copied to the host; empty for the others.
  virtual StatusOr<std::vector<float>> Unsent() = 0;
};

struct BenchResult {
  double encode_s = 0;         // median seconds: device gradient to encoded bytes on the host
  double encode_device_s = 0;  // median seconds: the encode alone, into device memory
  double decode_s = 0;         // median seconds: device bytes to device floats
  double copy_s = 0;           // median seconds: a device-to-device copy of the gradient
};
// Times encode (to host bytes, and on the device alone), decode and, as the memory bandwidth
// reference of the same run, a device-to-device copy of x on the GPU.
StatusOr<BenchResult> Benchmark(const CodecSpec& spec, const std::vector<float>& x,
                                const CodecContext& ctx, double seconds,
                                std::vector<uint8_t>& bytes);

}  // namespace hetps::compress::gpu
