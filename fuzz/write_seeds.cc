// Writes each fuzz target's seed corpus into DIR/<target>/: real messages and files, made by
// the same code that makes them in a running cluster (codec encodings of a gradient, headers
// as a client sends them, IDX files as the data set ships them) or, for the status JSON, a
// document a scheduler served. Usage: hetps-fuzz-seeds DIR
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/compress/codec.h"
#include "common/message.h"
#include "fuzz/fuzz_specs.h"
#include "server/checkpoint_file.h"
#include "server/log_record.h"

namespace {

namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

// Per codec: the fuzz target's 8-byte prefix (spec index, n - 1, cols, step), then the
// encoding of a gradient of n = 256 values (16 rows of 16 when cols is odd).
void CodecSeeds(const fs::path& dir) {
  using namespace hetps::compress;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> g(256);
  for (float& v : g) v = normal(rng);
  const auto& specs = hetps::fuzz::CodecSpecs();
  for (size_t i = 0; i < specs.size(); ++i) {
    for (int rows : {0, 1}) {
      auto codec = MakeCodec(*ParseCodecSpec(specs[i]));
      CodecContext ctx;
      ctx.key = {1, 2, 3};
      ctx.cols = rows ? 16 : 0;
      auto state = (*codec)->NewState(256);
      std::vector<uint8_t> out;
      (*codec)->Encode(g.data(), 256, ctx, state.get(), out);
      // cols in the target: odd cols_bits -> 1 + cols_bits % n, so 15 gives 16.
      const uint8_t prefix[8] = {
          static_cast<uint8_t>(i), 255, 0, 0, 0, static_cast<uint8_t>(rows ? 15 : 0), 0, 3};
      std::string seed(reinterpret_cast<const char*>(prefix), 8);
      seed.append(out.begin(), out.end());
      Write(dir, "codec-" + std::to_string(i) + "-" + std::to_string(rows), seed);
    }
  }
}

void SpecSeeds(const fs::path& dir) {
  int k = 0;
  for (const std::string& s : hetps::fuzz::CodecSpecs())
    Write(dir, "spec-" + std::to_string(k++), s);
  Write(dir, "layers", "default=topk:density=0.01,ef=1;layer0=fp16;layer3=none");
  Write(dir, "list", "1,2,4,8");
}

std::string Frame(const std::string& bytes) {
  const size_t n = std::min<size_t>(bytes.size(), 65535);
  std::string f = {static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
  return f + bytes.substr(0, n);
}

void WireSeeds(const fs::path& dir) {
  hetps::proto::Header push;
  push.set_type(hetps::proto::PUSH);
  push.set_sender(3);
  push.set_request_id(17);
  push.set_partition(2);
  push.set_clock(40);
  push.set_version(39);
  push.set_weight(1.0);
  push.set_codec("topk:density=0.05");
  push.set_incarnation(0x5eed);
  push.set_seq(12);
  Write(dir, "push", Frame(push.SerializeAsString()) + Frame(std::string(64, '\x01')));
  hetps::proto::Header pull;
  pull.set_type(hetps::proto::PULL);
  pull.set_sender(3);
  pull.set_request_id(18);
  pull.set_partition(2);
  Write(dir, "pull", Frame(pull.SerializeAsString()));
  Write(dir, "error",
        Frame(hetps::ErrorReply(push, hetps::Status::Unavailable("gone"), 4).SerializeAsString()));
  // A batch (common/batch.h) of the push and the pull: the push's frame follows the header.
  hetps::proto::Header batch;
  batch.set_type(hetps::proto::BATCH);
  batch.set_sender(3);
  *batch.add_batch() = push;
  batch.add_batch_frames(1);
  *batch.add_batch() = pull;
  batch.add_batch_frames(0);
  Write(dir, "batch", Frame(batch.SerializeAsString()) + Frame(std::string(64, '\x01')));
}

// IDX files as Debian's data set ships them (gzip) and plain: labels and 2 images of 3 x 3.
void IdxSeeds(const fs::path& dir) {
  const std::string labels = std::string("\0\0\x08\x01\0\0\0\x03", 8) + "\x01\x02\x09";
  std::string images = std::string("\0\0\x08\x03\0\0\0\x02\0\0\0\x03\0\0\0\x03", 16);
  for (int i = 0; i < 18; ++i) images += static_cast<char>(i * 14);
  Write(dir, "labels", labels);
  Write(dir, "images", images);
  const fs::path gz = dir / "images.gz";
  gzFile f = gzopen(gz.c_str(), "wb");
  gzwrite(f, images.data(), static_cast<unsigned>(images.size()));
  gzclose(f);
}

void StatusSeeds(const fs::path& dir) {
  Write(dir, "scheduler",
#include "fuzz/status_seed.inc"
  );
  Write(dir, "empty", "{}");
}

void LaunchSeeds(const fs::path& dir) {
  using namespace std::string_literals;
  Write(dir, "quickstart",
        "--servers=2\0--workers=4\0--iterations=100\0--consistency=ssp:staleness=2"s);
  Write(dir, "hosts", "-H\0node1:2,alice@10.0.0.2:1\0--scheduler_port=7000\0--workers=3"s);
  Write(dir, "restart", "--restart=on-failure:3\0--data_dir=/var/lib/hetps/{i}\0--links=netns"s);
}

// A log record of each kind as the durable store writes it, with and without floats.
void LogRecordSeeds(const fs::path& dir) {
  hetps::proto::LogRecord push;
  push.set_kind(hetps::proto::LogRecord::PUSH);
  push.set_worker(3);
  push.set_clock(7);
  push.set_incarnation(0x1234);
  push.set_seq(9);
  Write(dir, "push", hetps::EncodeLogPrefix(push) + std::string(64, '\x01'));
  hetps::proto::LogRecord ref = push;
  ref.mutable_value_ref()->set_length(1 << 20);
  ref.mutable_value_ref()->set_hash(42);
  Write(dir, "value_ref", hetps::EncodeLogPrefix(ref));
  hetps::proto::LogRecord round;
  round.set_kind(hetps::proto::LogRecord::ROUND);
  Write(dir, "round", hetps::EncodeLogPrefix(round));
}

// A checkpoint file of two arrays of 16 floats, as the fuzz target's partition keeps.
void CheckpointFileSeeds(const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<float> values(16, 0.5f), slots(16, 0.25f);
  hetps::proto::PartitionCheckpoint meta;
  meta.set_lsn(12);
  (void)hetps::WriteCheckpointFile((dir / "two-arrays").string(), meta,
                                   {values.data(), slots.data()}, 16 * sizeof(float), false);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  CodecSeeds(root / "codec_decode_fuzz");
  SpecSeeds(root / "spec_fuzz");
  WireSeeds(root / "wire_fuzz");
  IdxSeeds(root / "idx_fuzz");
  StatusSeeds(root / "status_json_fuzz");
  LaunchSeeds(root / "launch_args_fuzz");
  LogRecordSeeds(root / "log_record_fuzz");
  CheckpointFileSeeds(root / "checkpoint_file_fuzz");
  return 0;
}
