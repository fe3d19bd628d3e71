#include "common/compress/codec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <set>

#include "common/compress/codecs.h"

namespace hetps::compress {

const CodecRegistry& Codecs() {
  static const CodecRegistry* r = [] {
    auto* r = new CodecRegistry("codec");
#define HETPS_CODEC(Class) Register##Class(*r);
#include "common/compress/codecs.def"
#undef HETPS_CODEC
    return r;
  }();
  return *r;
}

std::vector<std::string> EveryCodec(std::vector<std::string> variants) {
  std::set<std::string> named;
  for (const std::string& v : variants) named.insert(v.substr(0, v.find(':')));
  for (const std::string& name : Codecs().Names()) {
    if (!named.contains(name)) variants.push_back(name);
  }
  return variants;
}

std::string CodecSpec::WireName() const { return SpecText(name, params); }

std::string CodecSpec::ToString() const {
  const std::string wire = WireName();
  // ef=1 is spelled out whenever set; ef=0 where the codec's default is 1 (onebit, efsign,
  // powersgd), or the text would parse back with error feedback on.
  const AlgorithmInfo* info = Codecs().Find(name);
  const ParamDef* def = info == nullptr ? nullptr : info->Param("ef");
  const bool on_by_default = def != nullptr && def->default_value == "1";
  if (!ef && !on_by_default) return wire;
  return wire + (params.empty() ? ":" : ",") + (ef ? "ef=1" : "ef=0");
}

StatusOr<CodecSpec> ParseCodecSpec(const std::string& text) {
  auto parsed = Codecs().Parse(text);
  if (!parsed.ok()) return parsed.status();
  CodecSpec spec;
  spec.name = parsed->name();
  spec.params = parsed->given();
  spec.params.erase("ef");
  spec.ef = parsed->Is("ef", "1");
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

double Codec::Param(const std::string& key) const {
  auto it = spec_.params.find(key);
  if (it != spec_.params.end()) return std::stod(it->second);
  const ParamDef* def = Codecs().Find(spec_.name)->Param(key);
  return def == nullptr ? 0 : std::stod(def->default_value);
}

Status Codec::SizeError(size_t size, int64_t want, int64_t n) const {
  return Status::SizeMismatch(fmt::format("{}: an encoding of {} elements has {} bytes, got {}",
                                          spec_.name, n, want, size));
}

StatusOr<std::shared_ptr<const Codec>> MakeCodec(const CodecSpec& spec) {
  if (Codecs().Find(spec.name) == nullptr) {
    return Status::InvalidArgument(fmt::format("unknown codec '{}' (known: {})", spec.name,
                                               fmt::join(Codecs().Names(), ", ")));
  }
  return std::shared_ptr<const Codec>(Codecs().EntryFor(spec.name).make(spec));
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
