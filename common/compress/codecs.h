// The codec factories, one per file; MakeCodec (codec.cc) picks one by name. Each takes a spec
// whose parameters ParseCodecSpec already validated.
#pragma once

#include <fmt/format.h>

#include <memory>

#include "common/compress/codec.h"

namespace hetps::compress {

std::unique_ptr<Codec> MakeNone(const CodecSpec& spec);
std::unique_ptr<Codec> MakeFp16(const CodecSpec& spec);
std::unique_ptr<Codec> MakeTopK(const CodecSpec& spec);
std::unique_ptr<Codec> MakeRandomK(const CodecSpec& spec);
std::unique_ptr<Codec> MakeDgc(const CodecSpec& spec);
std::unique_ptr<Codec> MakeQsgd(const CodecSpec& spec);
std::unique_ptr<Codec> MakeTernGrad(const CodecSpec& spec);
std::unique_ptr<Codec> MakeOneBit(const CodecSpec& spec);
std::unique_ptr<Codec> MakeEfSign(const CodecSpec& spec);
std::unique_ptr<Codec> MakePowerSgd(const CodecSpec& spec);

}  // namespace hetps::compress
