#include "bench/codec.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "common/compress/codec.h"
#include "worker/compress/gpu_codec.h"

namespace hetps::bench {

int RunCodecBench(const CodecBenchOptions& o) {
  auto spec = compress::ParseCodecSpec(o.codec);
  if (!spec.ok()) {
    std::fprintf(stderr, "hetps-bench codec: %s\n", spec.status().message().c_str());
    return 2;
  }
  if (o.elements < 1 || (o.device != "cpu" && o.device != "gpu")) {
    std::fprintf(stderr, "hetps-bench codec: --elements >= 1 and --device cpu|gpu\n");
    return 2;
  }
  const int64_t n = o.elements;
  std::vector<float> x(n);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> d;
  for (float& v : x) v = d(rng);
  const double gb = static_cast<double>(n) * sizeof(float) / 1e9;
  compress::CodecContext ctx;
  ctx.key = {0, 0, 1};
  ctx.cols = 1024;  // powersgd: treat the vector as rows of 1024
  std::vector<uint8_t> bytes;
  std::vector<float> y(n), copy(n);
  double encode_s = 0, decode_s = 0;
  std::string device_fields;  // gpu: the encode alone and the device's copy bandwidth
  if (o.device == "gpu") {
    auto gpu = compress::gpu::Benchmark(*spec, x, ctx, o.seconds, bytes);
    if (!gpu.ok()) {
      std::fprintf(stderr, "hetps-bench codec: %s\n", gpu.status().message().c_str());
      return 1;
    }
    encode_s = gpu->encode_s;
    decode_s = gpu->decode_s;
    // A copy reads and writes every byte: its bandwidth counts both. The fractions say how
    // close each kernel comes to the least traffic it needs, one read of its input.
    const double copy_gbps = 2 * gb / gpu->copy_s;
    device_fields = fmt::format(
        ",\"encode_device_gbps\":{:.3f},\"d2d_copy_gbps\":{:.3f},\"encode_device_vs_copy\":{:.3f},"
        "\"decode_vs_copy\":{:.3f}",
        gb / gpu->encode_device_s, copy_gbps, gb / gpu->encode_device_s / copy_gbps,
        gb / gpu->decode_s / copy_gbps);
  } else {
    auto codec = compress::MakeCodec(*spec);
    auto state = (*codec)->NewState(n);
    encode_s =
        MedianSeconds([&] { (*codec)->Encode(x.data(), n, ctx, state.get(), bytes); }, o.seconds);
    decode_s = MedianSeconds(
        [&] {
          if (!(*codec)->Decode(bytes.data(), bytes.size(), n, ctx, y.data()).ok()) std::abort();
        },
        o.seconds);
  }
  const double memcpy_s =
      MedianSeconds([&] { std::memcpy(copy.data(), x.data(), n * sizeof(float)); }, o.seconds);
  std::printf(
      "{\"bench\":\"codec\",\"codec\":\"%s\",\"device\":\"%s\",\"elements\":%lld,"
      "\"encode_gbps\":%.3f,\"decode_gbps\":%.3f,\"ratio\":%.2f,\"encoded_bytes\":%zu,"
      "\"memcpy_gbps\":%.3f,\"encode_vs_memcpy\":%.3f%s}\n",
      spec->ToString().c_str(), o.device.c_str(), static_cast<long long>(n), gb / encode_s,
      gb / decode_s, static_cast<double>(n) * sizeof(float) / bytes.size(), bytes.size(),
      gb / memcpy_s, memcpy_s / encode_s, device_fields.c_str());
  return 0;
}

}  // namespace hetps::bench
