#include "common/compress/codec.h"

#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <set>

#include "common/compress/codecs.h"

namespace hetps::compress {
namespace {

// A parameter's accepted range; integral ones must be whole numbers.
struct ParamRule {
  double min, max;
  bool min_open = false;
  bool integral = false;
};

struct CodecInfo {
  std::unique_ptr<Codec> (*make)(const CodecSpec&);
  std::map<std::string, ParamRule> params;
  bool ef_default = false;
};

const std::map<std::string, CodecInfo>& Registry() {
  const ParamRule density{0, 1, /*min_open=*/true};
  const ParamRule seed{0, 4294967295.0, false, true};
  const ParamRule flag{0, 1, false, true};
  static const std::map<std::string, CodecInfo> r = {
      {"none", {MakeNone, {}}},
      {"fp16", {MakeFp16, {}}},
      {"topk", {MakeTopK, {{"density", density}}}},
      {"randomk", {MakeRandomK, {{"density", density}, {"seed", seed}, {"unbiased", flag}}}},
      {"dgc",
       {MakeDgc,
        {{"density", density},
         {"momentum", {0, 1}},
         {"warmup", {0, 1000, false, true}},
         {"epoch", {1, 1e12, false, true}},
         {"sample", density}}}},
      {"qsgd", {MakeQsgd, {{"levels", {1, 65535, false, true}}, {"seed", seed}}}},
      {"terngrad", {MakeTernGrad, {{"seed", seed}}}},
      {"onebit", {MakeOneBit, {}, true}},
      {"efsign", {MakeEfSign, {}, true}},
      {"powersgd", {MakePowerSgd, {{"rank", {1, 1024, false, true}}, {"seed", seed}}, true}},
  };
  return r;
}

std::string Known() {
  std::string names;
  for (const auto& [name, info] : Registry()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

StatusOr<double> Number(const std::string& key, const std::string& text, const ParamRule& rule) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument(fmt::format("{}={}: not a number", key, text));
  }
  const bool below = rule.min_open ? v <= rule.min : v < rule.min;
  if (below || v > rule.max ||
      (rule.integral && v != static_cast<double>(static_cast<int64_t>(v)))) {
    return Status::InvalidArgument(fmt::format("{}={}: must be a {} in {}{}, {}]", key, text,
                                               rule.integral ? "whole number" : "number",
                                               rule.min_open ? "(" : "[", rule.min, rule.max));
  }
  return v;
}

}  // namespace

std::string CodecSpec::WireName() const {
  if (params.empty()) return name;
  std::string s = name + ":";
  bool first = true;
  for (const auto& [k, v] : params) {
    s += (first ? "" : ",") + k + "=" + v;
    first = false;
  }
  return s;
}

std::string CodecSpec::ToString() const {
  const std::string wire = WireName();
  if (!ef) return wire;
  return wire + (params.empty() ? ":ef=1" : ",ef=1");
}

StatusOr<CodecSpec> ParseCodecSpec(const std::string& text) {
  CodecSpec spec;
  const size_t colon = text.find(':');
  spec.name = text.substr(0, colon);
  auto it = Registry().find(spec.name);
  if (it == Registry().end()) {
    return Status::InvalidArgument(
        fmt::format("unknown codec '{}' (known: {})", spec.name, Known()));
  }
  spec.ef = it->second.ef_default;
  if (colon == std::string::npos) return spec;
  const std::string rest = text.substr(colon + 1);
  size_t begin = 0;
  while (begin <= rest.size()) {
    size_t end = rest.find(',', begin);
    if (end == std::string::npos) end = rest.size();
    const std::string item = rest.substr(begin, end - begin);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument(
          fmt::format("codec '{}': expected key=value, got '{}'", spec.name, item));
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "ef") {
      auto v = Number(key, value, {0, 1, false, true});
      if (!v.ok())
        return Status::InvalidArgument(
            fmt::format("codec '{}': {}", spec.name, v.status().message()));
      spec.ef = *v == 1;
    } else {
      auto rule = it->second.params.find(key);
      if (rule == it->second.params.end()) {
        std::string keys = "ef";
        for (const auto& [k, r] : it->second.params) keys += ", " + k;
        return Status::InvalidArgument(
            fmt::format("codec '{}' has no parameter '{}' (known: {})", spec.name, key, keys));
      }
      auto v = Number(key, value, rule->second);
      if (!v.ok())
        return Status::InvalidArgument(
            fmt::format("codec '{}': {}", spec.name, v.status().message()));
      if (spec.params.count(key)) {
        return Status::InvalidArgument(fmt::format("codec '{}': '{}' given twice", spec.name, key));
      }
      spec.params[key] = value;
    }
    begin = end + 1;
  }
  return spec;
}

StatusOr<LayerCodecs> LayerCodecs::Parse(const std::string& text) {
  LayerCodecs lc;
  const bool per_layer = text.rfind("default=", 0) == 0 || text.rfind("layer", 0) == 0;
  if (!per_layer) {
    auto spec = ParseCodecSpec(text);
    if (!spec.ok()) return spec.status();
    lc.default_ = *spec;
    return lc;
  }
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(';', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    begin = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(
          fmt::format("codec choice '{}': expected default=SPEC or layerN=SPEC", item));
    }
    const std::string target = item.substr(0, eq);
    auto spec = ParseCodecSpec(item.substr(eq + 1));
    if (!spec.ok())
      return Status::InvalidArgument(fmt::format("{}: {}", target, spec.status().message()));
    if (target == "default") {
      lc.default_ = *spec;
      continue;
    }
    int32_t layer = -1;
    const char* digits = target.data() + 5;
    auto [p, ec] = std::from_chars(digits, target.data() + target.size(), layer);
    if (target.rfind("layer", 0) != 0 || ec != std::errc() || p != target.data() + target.size() ||
        layer < 0) {
      return Status::InvalidArgument(
          fmt::format("codec choice '{}': expected default or layerN (N >= 0)", target));
    }
    lc.layers_[layer] = *spec;
  }
  return lc;
}

const CodecSpec& LayerCodecs::For(int32_t layer) const {
  auto it = layers_.find(layer);
  return it == layers_.end() ? default_ : it->second;
}

std::string LayerCodecs::ToString() const {
  if (layers_.empty()) return default_.ToString();
  std::string s = "default=" + default_.ToString();
  for (const auto& [layer, spec] : layers_) s += fmt::format(";layer{}={}", layer, spec.ToString());
  return s;
}

double Codec::Param(const std::string& key, double fallback) const {
  auto it = spec_.params.find(key);
  return it == spec_.params.end() ? fallback : std::stod(it->second);
}

Status Codec::SizeError(size_t size, int64_t want, int64_t n) const {
  return Status::SizeMismatch(fmt::format("{}: an encoding of {} elements has {} bytes, got {}",
                                          spec_.name, n, want, size));
}

StatusOr<std::shared_ptr<const Codec>> MakeCodec(const CodecSpec& spec) {
  auto it = Registry().find(spec.name);
  if (it == Registry().end()) {
    return Status::InvalidArgument(
        fmt::format("unknown codec '{}' (known: {})", spec.name, Known()));
  }
  return std::shared_ptr<const Codec>(it->second.make(spec));
}

StatusOr<std::shared_ptr<const Codec>> CodecCache::Get(const std::string& wire_name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = codecs_.find(wire_name);
  if (it != codecs_.end()) return it->second;
  auto spec = ParseCodecSpec(wire_name);
  if (!spec.ok()) return spec.status();
  auto codec = MakeCodec(*spec);
  if (!codec.ok()) return codec.status();
  if (codecs_.size() < 256) codecs_[wire_name] = *codec;  // bounded: names come from peers
  return *codec;
}

int64_t RowLength(const std::vector<int64_t>& shape, int64_t offset, int64_t length) {
  if (shape.size() < 2 || shape.back() < 1) return 0;
  const int64_t cols = shape.back();
  return offset % cols == 0 && length % cols == 0 ? cols : 0;
}

PartitionEncoder::PartitionEncoder(std::shared_ptr<const Codec> codec, bool ef, int64_t n)
    : codec_(std::move(codec)), ef_(ef), n_(n), state_(codec_->NewState(n)) {
  if (ef_) {
    residual_.assign(n, 0.0f);
    p_.resize(n);
    decoded_.resize(n);
  }
}

Status PartitionEncoder::Encode(const float* g, const CodecContext& ctx,
                                std::vector<uint8_t>& out) {
  if (!ef_) {
    codec_->Encode(g, n_, ctx, state_.get(), out);
    return Status();
  }
  for (int64_t i = 0; i < n_; ++i) p_[i] = g[i] + residual_[i];
  codec_->Encode(p_.data(), n_, ctx, state_.get(), out);
  if (Status s = codec_->Decode(out.data(), out.size(), n_, ctx, decoded_.data()); !s.ok()) {
    return Status::Internal(
        fmt::format("{} cannot decode its own encoding: {}", codec_->spec().name, s.message()));
  }
  for (int64_t i = 0; i < n_; ++i) residual_[i] = p_[i] - decoded_[i];
  return Status();
}

}  // namespace hetps::compress
