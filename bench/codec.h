// `hetps-bench codec`: encode and decode throughput of one codec on one thread (GB/s of float32
// input), its compression ratio, and a memcpy of the same bytes measured in the same run.
#pragma once

#include <string>

namespace hetps::bench {

struct CodecBenchOptions {
  std::string codec = "topk:density=0.01";
  int64_t elements = 16 << 20;
  std::string device = "cpu";  // cpu | gpu
  double seconds = 3;          // per measured operation
};

int RunCodecBench(const CodecBenchOptions& options);

}  // namespace hetps::bench
