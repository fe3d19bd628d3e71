// `hetps status`'s renderer on hostile JSON (what a scheduler, or something posing as one,
// answers): any document either renders or is refused with a message; wrong types, missing
// fields and huge numbers never crash it.
#include <cstdint>
#include <string>

#include "cli/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)hetps::RenderStatus(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
