#include "server/table/table_export.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/json_file.h"
#include "server/table/table_bucket.h"

namespace hetps {
namespace {

// The shards of `table` this server holds, with their bucket index; an error names a bucket
// that has none (its options did not build).
StatusOr<std::vector<std::pair<int32_t, TableShard*>>> ShardsOf(const ShardMap& map,
                                                                PartitionStore& store,
                                                                const std::string& table) {
  const int32_t t = map.TensorId(table);
  if (t < 0 || !map.tensors()[t].is_table()) {
    return Status::NotFound(fmt::format("no sparse table '{}'", table));
  }
  std::vector<std::pair<int32_t, TableShard*>> shards;
  for (int32_t id : map.PartitionsOf(t)) {
    PartitionState* part = store.Find(id);
    if (part == nullptr || part->table() == nullptr) continue;  // another server's
    if (part->table()->shard() == nullptr) return part->table()->error();
    shards.emplace_back(map.partitions()[id].index, part->table()->shard());
  }
  return shards;
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

// Writes one bucket's file; fills `out`. The shard's export books are cleared as its rows go.
Status WriteBucket(const std::string& dir, int32_t bucket, int32_t buckets, bool full,
                   TableShard& shard, proto::BucketExport& out) {
  const std::string name = fmt::format("bucket-{:05d}.rows", bucket);
  const std::string path = dir + "/" + name, tmp = path + ".tmp";
  std::unique_ptr<FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  if (!f) return Status::Internal(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  std::vector<char> buffer(1 << 20);
  std::setvbuf(f.get(), buffer.data(), _IOFBF, buffer.size());
  char header[kExportHeaderBytes] = {};
  std::fwrite(header, 1, sizeof(header), f.get());  // filled in once the counts are known
  const size_t row_bytes = static_cast<size_t>(shard.dim()) * sizeof(float);
  uint64_t rows = 0, tombstones = 0;
  const bool was_full = shard.Export(
      full,
      [&](uint64_t key, const float* values) {
        std::fwrite(&key, sizeof(key), 1, f.get());
        std::fwrite(values, 1, row_bytes, f.get());
        ++rows;
      },
      [&](uint64_t key) {
        std::fwrite(&key, sizeof(key), 1, f.get());
        ++tombstones;
      });
  const uint32_t fields[6] = {kExportFileFormat,
                              static_cast<uint32_t>(shard.dim()),
                              static_cast<uint32_t>(bucket),
                              static_cast<uint32_t>(buckets),
                              full || was_full ? 1u : 0u,
                              0};
  std::memcpy(header, kExportMagic, sizeof(kExportMagic));
  std::memcpy(header + 8, fields, sizeof(fields));
  std::memcpy(header + 32, &tombstones, sizeof(tombstones));
  std::memcpy(header + 40, &rows, sizeof(rows));
  const bool written = std::fseek(f.get(), 0, SEEK_SET) == 0 &&
                       std::fwrite(header, 1, sizeof(header), f.get()) == sizeof(header) &&
                       std::fflush(f.get()) == 0 && !std::ferror(f.get()) &&
                       fsync(fileno(f.get())) == 0;
  f.reset();
  if (!written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return Status::Internal(fmt::format("cannot write {}: {}", path, why));
  }
  out.set_bucket(bucket);
  out.set_file(name);
  out.set_full(full || was_full);
  out.set_rows(static_cast<int64_t>(rows));
  out.set_tombstones(static_cast<int64_t>(tombstones));
  out.set_bytes(static_cast<int64_t>(kExportHeaderBytes + tombstones * sizeof(uint64_t) +
                                     rows * (sizeof(uint64_t) + row_bytes)));
  return Status();
}

}  // namespace

StatusOr<proto::TableExport> ExportTable(const ShardMap& map, PartitionStore& store,
                                         int32_t server_rank, const proto::TableExport& request) {
  const auto start = std::chrono::steady_clock::now();
  auto shards = ShardsOf(map, store, request.table());
  if (!shards.ok()) return shards.status();
  std::error_code ec;
  std::filesystem::create_directories(request.dir(), ec);
  if (ec) {
    return Status::Internal(fmt::format("server rank {} cannot create {}: {}", server_rank,
                                        request.dir(), ec.message()));
  }
  const int32_t buckets =
      static_cast<int32_t>(map.PartitionsOf(map.TensorId(request.table())).size());
  proto::TableExport answer;
  answer.set_table(request.table());
  for (auto& [bucket, shard] : *shards) {
    Status s =
        WriteBucket(request.dir(), bucket, buckets, request.full(), *shard, *answer.add_files());
    if (!s.ok()) {
      CallOffExport(map, store, request.table());
      return s;
    }
  }
  if (Status s = SyncPath(request.dir()); !s.ok()) {  // the renames
    CallOffExport(map, store, request.table());
    return s;
  }
  answer.set_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return answer;
}

void CallOffExport(const ShardMap& map, PartitionStore& store, const std::string& table) {
  auto shards = ShardsOf(map, store, table);
  if (!shards.ok()) return;
  for (auto& [bucket, shard] : *shards) shard->ForceFullExport();
}

}  // namespace hetps
