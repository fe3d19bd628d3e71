#include "worker/train/gradient_encoders.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "common/compress/codec.h"
#include "worker/compress/gpu_codec.h"

namespace hetps {
namespace {

compress::CodecContext ContextOf(const Client::PartitionSlice& slice) {
  compress::CodecContext ctx;
  ctx.key = {0, slice.partition, slice.step};
  ctx.cols = slice.cols;
  return ctx;
}

void RawBytes(const float* host, int64_t n, std::vector<uint8_t>& out) {
  out.resize(static_cast<size_t>(n) * sizeof(float));
  std::memcpy(out.data(), host, out.size());
}

// One partition's encoder, made at its first push; its spec may not change afterwards.
struct Entry {
  std::string codec;
  std::unique_ptr<compress::PartitionEncoder> host;  // CPU codec (host memory)
  std::unique_ptr<compress::gpu::Encoder> device;    // CUDA twin (device memory)
  std::vector<float> staging;                        // device encoders: host copy of the slice
};

class Encoders : public GradientEncoders {
 public:
  explicit Encoders(bool on_device) : on_device_(on_device) {}

  Status Encode(const Client::PartitionSlice& slice, const float* grad,
                std::vector<uint8_t>& out) override {
    auto entry = EntryFor(slice);
    if (!entry.ok()) return entry.status();
    Entry& e = **entry;
    const float* g = grad + slice.offset;
    if (e.device) return e.device->EncodeDevice(g, ContextOf(slice), out);
    if (on_device_) {  // raw, or a codec without a twin: through the host
      e.staging.resize(slice.length);
      if (Status s = compress::gpu::CopyToHost(g, slice.length, e.staging.data()); !s.ok()) {
        return s;
      }
      g = e.staging.data();
    }
    if (!e.host) {
      RawBytes(g, slice.length, out);
      return Status();
    }
    return e.host->Encode(g, ContextOf(slice), out);
  }

  StatusOr<std::vector<float>> Residual(int32_t partition) override {
    auto it = entries_.find(partition);
    if (it == entries_.end()) return std::vector<float>();
    if (it->second.device) return it->second.device->Residual();
    if (it->second.host) return it->second.host->residual();
    return std::vector<float>();
  }

  int64_t device_partitions() const override {
    int64_t n = 0;
    for (const auto& [pid, e] : entries_) n += e.device != nullptr;
    return n;
  }

 private:
  StatusOr<Entry*> EntryFor(const Client::PartitionSlice& slice) {
    auto it = entries_.find(slice.partition);
    if (it != entries_.end()) {
      if (it->second.codec != slice.codec) {
        return Status::InvalidArgument(
            fmt::format("partition {} was encoded with {}, now asked for {}", slice.partition,
                        it->second.codec, slice.codec));
      }
      return &it->second;
    }
    auto spec = compress::ParseCodecSpec(slice.codec);
    if (!spec.ok()) return spec.status();
    Entry e;
    e.codec = slice.codec;
    if (spec->name != "none") {
      if (on_device_ && compress::gpu::Supported(spec->name)) {
        auto made = compress::gpu::Encoder::Create(*spec, slice.length);
        if (!made.ok()) return made.status();
        e.device = std::move(*made);
      } else {
        auto codec = compress::MakeCodec(*spec);
        if (!codec.ok()) return codec.status();
        e.host = std::make_unique<compress::PartitionEncoder>(*codec, spec->ef, slice.length);
      }
    }
    return &entries_.emplace(slice.partition, std::move(e)).first->second;
  }

  const bool on_device_;
  std::map<int32_t, Entry> entries_;
};

}  // namespace

std::unique_ptr<GradientEncoders> MakeHostEncoders() { return std::make_unique<Encoders>(false); }

StatusOr<std::unique_ptr<GradientEncoders>> MakeDeviceEncoders() {
  std::string why;
  if (!compress::gpu::Usable(&why)) return Status::FailedPrecondition(why);
  return std::unique_ptr<GradientEncoders>(std::make_unique<Encoders>(true));
}

}  // namespace hetps
