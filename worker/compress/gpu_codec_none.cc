// Builds without nvcc: no GPU codecs.
#include "worker/compress/gpu_codec.h"

namespace hetps::compress::gpu {

bool Usable(std::string* why) {
  if (why) *why = "this build has no CUDA (nvcc was not found at configure time)";
  return false;
}

bool Supported(const std::string&) { return false; }

Status CopyToHost(const float*, int64_t, float*) {
  std::string why;
  Usable(&why);
  return Status::FailedPrecondition(why);
}

StatusOr<std::unique_ptr<DeviceFloats>> DeviceFloats::Create(int64_t) {
  std::string why;
  Usable(&why);
  return Status::FailedPrecondition(why);
}

StatusOr<std::unique_ptr<Encoder>> Encoder::Create(const CodecSpec&, int64_t) {
  std::string why;
  Usable(&why);
  return Status::FailedPrecondition(why);
}

StatusOr<BenchResult> Benchmark(const CodecSpec&, const std::vector<float>&, const CodecContext&,
                                double, std::vector<uint8_t>&) {
  std::string why;
  Usable(&why);
  return Status::FailedPrecondition(why);
}

}  // namespace hetps::compress::gpu
