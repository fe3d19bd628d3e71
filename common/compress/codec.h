// Gradient compression codecs (ALGORITHMS.md §8): one interface, one file per codec, chosen by
// a spec string such as "topk:density=0.01,ef=1" from the codec registry (common/registry.h).
// Workers encode each partition of a push; servers validate and decode before aggregating. The CPU
// codecs are the reference for the CUDA kernels in worker/compress/cuda/.
//
// A codec object is immutable and thread-safe. State that lives between pushes of one
// partition (error-feedback residual, DGC momentum, PowerSGD's Q) lives in a PartitionEncoder
// on the worker, where the gradient is.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/compress/philox.h"
#include "common/registry.h"
#include "common/status.h"

namespace hetps::compress {

struct CodecSpec {
  std::string name = "none";
  std::map<std::string, std::string> params;  // without "ef"
  bool ef = false;                            // wrap in error feedback (worker side)
  // "name" or "name:k=v,..." with the parameters sorted, ef left out: what travels in a header.
  std::string WireName() const;
  // WireName plus ef=1 when set, or ef=0 when not and the codec's default is on: text that
  // parses back to this spec.
  std::string ToString() const;
};

class Codec;
struct CodecEntry {
  std::function<std::unique_ptr<Codec>(const CodecSpec&)> make;
};
using CodecRegistry = Registry<CodecEntry>;
// Every codec (codecs.def), with its parameters; "ef" is one of each codec's parameters.
const CodecRegistry& Codecs();

// `variants` (specs with chosen parameters) followed by every registered codec that none of them
// names, at its defaults: the lists the tests, the fuzz targets and their seeds cover, so that a
// codec is covered by registering it.
std::vector<std::string> EveryCodec(std::vector<std::string> variants = {});

// Parses "name[:key=value,...]". Unknown codecs and parameters, and bad values, are errors.
StatusOr<CodecSpec> ParseCodecSpec(const std::string& text);

// Per-layer choice: "SPEC" for every layer, or "default=SPEC;layer0=SPEC;layer3=SPEC".
class LayerCodecs {
 public:
  static StatusOr<LayerCodecs> Parse(const std::string& text);
  const CodecSpec& For(int32_t layer) const;
  std::string ToString() const;

 private:
  CodecSpec default_;
  std::map<int32_t, CodecSpec> layers_;
};

// What an encode or decode of one partition depends on besides the values.
struct CodecContext {
  RngKey key;        // seed (the spec's "seed"), global partition id, step (the push's clock)
  int64_t cols = 0;  // the tensor's trailing dimension when the partition is whole rows (PowerSGD)
};

struct CodecState {
  virtual ~CodecState() = default;
};

class Codec {
 public:
  explicit Codec(CodecSpec spec) : spec_(std::move(spec)) {}
  virtual ~Codec() = default;
  const CodecSpec& spec() const { return spec_; }

  // State kept per partition between encodes (nullptr: none).
  virtual std::unique_ptr<CodecState> NewState(int64_t /*n*/) const { return nullptr; }
  // Values a stateful codec accumulated but has not sent yet (DGC's v), or nullptr.
  virtual const std::vector<float>* Unsent(const CodecState* /*state*/) const { return nullptr; }
  // Bytes of an encoding of n elements, or -1 when it depends on the values (DGC).
  virtual int64_t EncodedBytes(int64_t n, const CodecContext& ctx) const = 0;
  // Replaces `out` with the encoding of x[0..n).
  virtual void Encode(const float* x, int64_t n, const CodecContext& ctx, CodecState* state,
                      std::vector<uint8_t>& out) const = 0;
  // Validates the encoding against n before reading it (size, indices, codes), then writes the
  // n decoded values to out.
  virtual Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext& ctx,
                        float* out) const = 0;

  // Numeric parameter `key` of the spec (validated at parse time), or its registered default;
  // 0 for a parameter this codec does not take (the seed of a deterministic codec).
  double Param(const std::string& key) const;

 protected:
  Status SizeError(size_t size, int64_t want, int64_t n) const;

 private:
  CodecSpec spec_;
};

StatusOr<std::shared_ptr<const Codec>> MakeCodec(const CodecSpec& spec);

// Codecs by wire name, parsed once (a server decodes many pushes with a few specs).
// Thread-safe.
class CodecCache {
 public:
  StatusOr<std::shared_ptr<const Codec>> Get(const std::string& wire_name);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Codec>> codecs_;
};

// The row length a codec may treat a partition as a matrix with: the tensor's trailing
// dimension when it has two or more and the partition is whole rows; else 0.
int64_t RowLength(const std::vector<int64_t>& shape, int64_t offset, int64_t length);

// The most bytes any codec's encoding of n values may take: an index and a value per element
// (top-k or DGC at density 1) plus 64 KiB for a codec's own header. A server reads no larger
// frame (server/server.h, MaxFrameBytes); a codec must stay within it (properties_test).
inline int64_t MaxEncodedBytes(int64_t n) { return 8 * n + (int64_t{64} << 10); }

// Encodes successive gradients of one partition, with error feedback when the spec asks:
// p = g + e; m = C(p); e = p - D(m) (ALGORITHMS.md §8). Not thread-safe.
class PartitionEncoder {
 public:
  PartitionEncoder(std::shared_ptr<const Codec> codec, bool ef, int64_t n);
  Status Encode(const float* g, const CodecContext& ctx, std::vector<uint8_t>& out);
  const std::vector<float>& residual() const { return residual_; }
  // The codec's own unsent accumulation (DGC), or nullptr.
  const std::vector<float>* unsent() const { return codec_->Unsent(state_.get()); }
  const Codec& codec() const { return *codec_; }

 private:
  std::shared_ptr<const Codec> codec_;
  bool ef_;
  int64_t n_;
  std::unique_ptr<CodecState> state_;
  std::vector<float> residual_, p_, decoded_;
};

}  // namespace hetps::compress
