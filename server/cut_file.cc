#include "server/cut_file.h"

#include <fmt/format.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/sst_file_writer.h>

#include <cstdio>
#include <filesystem>

#include "common/same_message.h"
#include "server/partition_store.h"
#include "server/rocks_status.h"

namespace hetps {
namespace {

constexpr char kCutMetaKey[] = "meta";

std::string PartitionKey(int32_t pid) {
  std::string key = "p";
  for (int i = 3; i >= 0; --i)
    key.push_back(static_cast<char>((static_cast<uint32_t>(pid) >> (8 * i)) & 0xff));
  return key;
}

}  // namespace

std::string CutFileName(const std::string& cut_dir, int server_rank, int owner) {
  return fmt::format("{}/server-{}-{}.sst", cut_dir, server_rank, owner);
}

StatusOr<int64_t> WriteCutFile(const std::string& path, proto::CutFileMeta meta,
                               PartitionStore& store, const std::vector<int32_t>& ids) {
  const std::string tmp = path + ".tmp";
  rocksdb::Options options;
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options);
  if (Status s = FromRocks(writer.Open(tmp), "cannot create " + tmp); !s.ok()) return s;
  meta.set_partitions(static_cast<int32_t>(ids.size()));
  if (Status s = FromRocks(writer.Put(kCutMetaKey, meta.SerializeAsString()), "writing " + tmp);
      !s.ok()) {
    return s;
  }
  std::string bytes;
  for (int32_t id : ids) {
    proto::PartitionCheckpoint part;
    store.Find(id)->Save(part);
    part.SerializeToString(&bytes);
    if (Status s = FromRocks(writer.Put(PartitionKey(id), bytes), "writing " + tmp); !s.ok()) {
      return s;
    }
  }
  if (Status s = FromRocks(writer.Finish(), "finishing " + tmp); !s.ok()) return s;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::Internal(fmt::format("cannot rename {} to {}", tmp, path));
  }
  std::error_code ec;
  return static_cast<int64_t>(std::filesystem::file_size(path, ec));
}

void CutJob::Write(PartitionStore& store, int owner, const std::vector<int32_t>& ids) {
  auto written = WriteCutFile(CutFileName(dir_, meta_.server_rank(), owner), meta_, store, ids);
  if (written.ok()) {
    bytes_ += *written;
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = written.status();
  }
  remaining_.fetch_sub(1);
}

CutReader::~CutReader() = default;

StatusOr<std::unique_ptr<CutReader>> CutReader::Open(const std::string& cut_dir, int server_rank) {
  namespace fs = std::filesystem;
  std::unique_ptr<CutReader> reader(new CutReader());
  reader->dir_ = cut_dir;
  const std::string prefix = fmt::format("server-{}-", server_rank);
  std::error_code ec;
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(cut_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && entry.path().extension() == ".sst") {
      paths.push_back(entry.path().string());
    }
  }
  if (paths.empty()) {
    return Status::NotFound(
        fmt::format("checkpoint {} holds no file of server rank {}", cut_dir, server_rank));
  }
  rocksdb::Options options;
  for (const std::string& path : paths) {
    auto file = std::make_unique<rocksdb::SstFileReader>(options);
    rocksdb::Status s = file->Open(path);
    if (s.ok()) s = file->VerifyChecksum();
    if (!s.ok()) {
      return Status::Malformed(
          fmt::format("checkpoint file {} is damaged: {}", path, s.ToString()));
    }
    std::unique_ptr<rocksdb::Iterator> it(file->NewIterator(rocksdb::ReadOptions()));
    it->Seek(kCutMetaKey);
    proto::CutFileMeta meta;
    if (!it->Valid() || it->key() != kCutMetaKey ||
        !meta.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Status::Malformed(fmt::format("checkpoint file {} has no readable meta record", path));
    }
    if (meta.format() < 1 || meta.format() > kCutFileFormat || meta.server_rank() != server_rank) {
      return Status::Malformed(fmt::format(
          "checkpoint file {}: format {}, server rank {} (this build reads format {} and expected "
          "rank {})",
          path, meta.format(), meta.server_rank(), kCutFileFormat, server_rank));
    }
    if (reader->files_.empty()) {
      reader->meta_ = meta;
    } else if (meta.clock() != reader->meta_.clock() ||
               !SameMessage(meta.shard_map(), reader->meta_.shard_map())) {
      return Status::Malformed(
          fmt::format("checkpoint files of server rank {} in {} disagree on the clock or the model",
                      server_rank, cut_dir));
    }
    reader->files_.push_back(std::move(file));
  }
  return reader;
}

StatusOr<proto::PartitionCheckpoint> CutReader::Read(int32_t pid) const {
  const std::string key = PartitionKey(pid);
  for (const auto& file : files_) {
    std::unique_ptr<rocksdb::Iterator> it(file->NewIterator(rocksdb::ReadOptions()));
    it->Seek(key);
    if (!it->status().ok()) {
      return Status::Malformed(fmt::format("checkpoint {}: reading partition {}: {}", dir_, pid,
                                           it->status().ToString()));
    }
    if (!it->Valid() || it->key() != key) continue;
    proto::PartitionCheckpoint part;
    if (!part.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Status::Malformed(
          fmt::format("checkpoint {}: partition {} does not parse", dir_, pid));
    }
    return part;
  }
  return Status::NotFound(fmt::format("checkpoint {} holds no partition {}", dir_, pid));
}

void RemapWorkers(proto::PartitionCheckpoint& part, const std::map<int32_t, int32_t>& ids) {
  part.clear_applied();
  google::protobuf::RepeatedPtrField<proto::PartitionCheckpoint::Held> held;
  for (auto& h : *part.mutable_held()) {
    auto it = ids.find(h.worker());
    if (it == ids.end()) continue;
    h.set_worker(it->second);
    *held.Add() = std::move(h);
  }
  part.mutable_held()->Swap(&held);
  for (auto& [name, by_worker] : *part.mutable_aggregator()->mutable_per_worker()) {
    proto::FloatsByWorker remapped;
    for (const auto& [w, floats] : by_worker.floats()) {
      if (auto it = ids.find(w); it != ids.end()) (*remapped.mutable_floats())[it->second] = floats;
    }
    for (const auto& [w, number] : by_worker.numbers()) {
      if (auto it = ids.find(w); it != ids.end()) {
        (*remapped.mutable_numbers())[it->second] = number;
      }
    }
    by_worker = std::move(remapped);
  }
}

}  // namespace hetps
