// The spec-string parsers on hostile text: codec specs, per-layer codec choices and integer
// lists, as flags and headers hand them over. Each either parses or says why; a parsed spec
// prints as text that parses to the same spec.
#include <cstdint>
#include <string>

#include "common/compress/codec.h"
#include "common/int_list.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hetps;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = compress::ParseCodecSpec(text);
  if (spec.ok()) {
    auto again = compress::ParseCodecSpec(spec->ToString());
    if (!again.ok() || again->ToString() != spec->ToString()) __builtin_trap();
    (void)compress::MakeCodec(*spec);
  }
  auto layers = compress::LayerCodecs::Parse(text);
  if (layers.ok()) {
    auto again = compress::LayerCodecs::Parse(layers->ToString());
    if (!again.ok() || again->ToString() != layers->ToString()) __builtin_trap();
  }
  (void)ParsePositiveList(text, 1 << 20);
  return 0;
}
