// What the fuzz targets and their seed writer share: the codec specs a server may be asked to
// decode with (variants of their parameters, and every registered codec: EveryCodec).
#pragma once

#include <string>
#include <vector>

#include "common/compress/codec.h"

namespace hetps::fuzz {

inline const std::vector<std::string>& CodecSpecs() {
  static const std::vector<std::string> specs = compress::EveryCodec(
      {"none", "fp16", "topk:density=0.05", "topk:density=1", "randomk:density=0.05,seed=3",
       "dgc:density=0.05,momentum=0.5", "qsgd:levels=16", "qsgd:levels=2", "terngrad", "onebit",
       "efsign", "powersgd:rank=2", "powersgd:rank=1"});
  return specs;
}

}  // namespace hetps::fuzz
