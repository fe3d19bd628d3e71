// The IDX reader (worker/train/idx.h) on hostile files, plain or gzip: a bad magic number, an
// unsupported type, dimensions whose product overflows or promises more than the file holds
// are refused with a message; nothing is read past the file.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "worker/train/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/hetps-idx-fuzz-" + std::to_string(getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto a = hetps::ReadIdx(path);
  if (a.ok()) {
    size_t elements = 1;
    for (int32_t d : a->dims) elements *= static_cast<size_t>(d);
    if (a->data.size() != elements) __builtin_trap();  // what it promises, exactly
  }
  return 0;
}
