// Every codec's decoder on hostile bytes, as a server runs it on a push: the spec and the
// partition's expected size come from the header (here the input's first bytes), the encoding
// from the payload. A decoder must refuse what does not fit and never read or write outside
// the encoding or the n output values.
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/compress/codec.h"
#include "fuzz/fuzz_specs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hetps;
  if (size < 8) return 0;
  const std::vector<std::string>& specs = fuzz::CodecSpecs();
  const std::string& text = specs[data[0] % specs.size()];
  uint32_t n_bits, cols_bits;
  std::memcpy(&n_bits, data + 1, 4);
  cols_bits = data[5] | (data[6] << 8);
  const int64_t n = 1 + n_bits % 65536;  // a partition of up to 64Ki floats
  const uint8_t step = data[7];
  data += 8;
  size -= 8;
  auto spec = compress::ParseCodecSpec(text);
  if (!spec.ok()) __builtin_trap();  // the list holds only valid specs
  auto codec = compress::MakeCodec(*spec);
  if (!codec.ok()) __builtin_trap();
  compress::CodecContext ctx;
  ctx.key = {1, 2, step};
  ctx.cols = cols_bits % 2 == 0 ? 0 : 1 + static_cast<int64_t>(cols_bits) % n;
  // The encoding in a buffer of exactly its size, so that the sanitizer sees any overread.
  std::vector<uint8_t> encoded(data, data + size);
  std::vector<float> out(static_cast<size_t>(n));
  (void)(*codec)->Decode(encoded.data(), encoded.size(), n, ctx, out.data());
  return 0;
}
