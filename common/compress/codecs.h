// What a codec's file needs to register itself (codecs.def lists them): the registration
// declarations and the parameter shapes codecs share.
#pragma once

#include <fmt/format.h>

#include <memory>

#include "common/compress/codec.h"

namespace hetps::compress {

#define HETPS_CODEC(Class) void Register##Class(CodecRegistry& r);
#include "common/compress/codecs.def"
#undef HETPS_CODEC

inline ParamDef Density(const char* def) {
  return ParamDef::Real("density", def, 0, 1, "fraction of values sent", /*min_open=*/true);
}
inline ParamDef Seed() {
  return ParamDef::Int("seed", "0", 0, 4294967295.0, "seed of the shared random stream");
}
// Error feedback (worker side): p = g + e; m = C(p); e = p - D(m).
inline ParamDef EfParam(bool on) {
  return ParamDef::Int("ef", on ? "1" : "0", 0, 1, "error feedback");
}

}  // namespace hetps::compress
