// A checkpoint file (server/checkpoint_file.h) from a damaged data dir, read into a partition of
// two arrays of 16 floats: a file is refused or read whole, and what was read, written again,
// reads back to the same checkpoint and the same arrays, bit for bit.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "server/checkpoint_file.h"

namespace {

constexpr size_t kFloats = 16;
constexpr size_t kBytes = kFloats * sizeof(float);

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/hetps-checkpoint-fuzz-" + std::to_string(getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  std::vector<float> values(kFloats), slots(kFloats);
  hetps::proto::PartitionCheckpoint meta;
  if (!hetps::ReadCheckpointFile(path, meta, {values.data(), slots.data()}, kBytes).ok()) {
    return 0;
  }
  if (!hetps::WriteCheckpointFile(path, meta, {values.data(), slots.data()}, kBytes, false).ok()) {
    __builtin_trap();
  }
  std::vector<float> values2(kFloats), slots2(kFloats);
  hetps::proto::PartitionCheckpoint meta2;
  if (!hetps::ReadCheckpointFile(path, meta2, {values2.data(), slots2.data()}, kBytes).ok() ||
      std::memcmp(values.data(), values2.data(), kBytes) != 0 ||
      std::memcmp(slots.data(), slots2.data(), kBytes) != 0 ||
      meta.SerializeAsString() != meta2.SerializeAsString()) {
    __builtin_trap();
  }
  return 0;
}
