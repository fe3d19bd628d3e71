#include "scheduler/scheduler_store.h"

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <filesystem>

#include "common/data_dir.h"

namespace hetps {
namespace {

constexpr int kFormat = 1;
constexpr char kStateKey[] = "scheduler";
constexpr char kFedKey[] = "fed";
constexpr char kFedClientPrefix[] = "fed/client/";

std::string FedClientKey(int32_t id) { return fmt::format("{}{:010d}", kFedClientPrefix, id); }

}  // namespace

SchedulerStore::SchedulerStore(std::string dir) : dir_(std::move(dir)) {}

SchedulerStore::~SchedulerStore() {
  if (db_) (void)db_->Close();
}

StatusOr<std::unique_ptr<SchedulerStore>> SchedulerStore::Open(const std::string& dir) {
  auto prepared = PrepareDataDir(dir, "scheduler data dir");
  if (!prepared.ok()) return prepared.status();
  const bool fresh = *prepared;
  rocksdb::Options options;
  options.create_if_missing = fresh;
  options.paranoid_checks = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status opened = rocksdb::DB::Open(options, dir, &raw);
  if (!opened.ok()) {
    return Status::FailedPrecondition(fmt::format(
        "scheduler data dir {} cannot be opened (damaged?): {}", dir, opened.ToString()));
  }
  std::unique_ptr<SchedulerStore> store(new SchedulerStore(dir));
  store->db_.reset(raw);
  std::string bytes;
  rocksdb::Status got = raw->Get(rocksdb::ReadOptions(), kStateKey, &bytes);
  if (got.IsNotFound()) {
    if (!fresh) {
      return Status::FailedPrecondition(
          fmt::format("scheduler data dir {} holds no scheduler state (damaged?)", dir));
    }
    return store;
  }
  proto::SchedulerState state;
  if (!got.ok() || !state.ParseFromString(bytes)) {
    return Status::Malformed(fmt::format("scheduler data dir {}: its state is damaged{}", dir,
                                         got.ok() ? "" : ": " + got.ToString()));
  }
  if (state.format() != kFormat) {
    return Status::FailedPrecondition(
        fmt::format("scheduler data dir {} has layout {}; this scheduler reads layout {}", dir,
                    state.format(), kFormat));
  }
  store->state_ = std::move(state);
  if (Status s = store->LoadFed(); !s.ok()) return s;
  return store;
}

Status SchedulerStore::LoadFed() {
  std::string bytes;
  rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), kFedKey, &bytes);
  if (got.IsNotFound()) return Status();
  proto::FedRoundsState fed;
  if (!got.ok() || !fed.ParseFromString(bytes)) {
    return Status::Malformed(fmt::format("scheduler data dir {}: its federated state is damaged{}",
                                         dir_, got.ok() ? "" : ": " + got.ToString()));
  }
  {
    proto::FedRoundsState core = fed;
    core.clear_saved_unix_s();
    core.clear_saved_now_s();
    fed_core_ = core.SerializeAsString();
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(kFedClientPrefix); it->Valid() && it->key().starts_with(kFedClientPrefix);
       it->Next()) {
    proto::FedClientState* c = fed.add_clients();
    if (!c->ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Status::Malformed(fmt::format(
          "scheduler data dir {}: the federated record {} is damaged", dir_, it->key().ToString()));
    }
    fed_clients_[c->id()] = it->value().ToString();
  }
  if (!it->status().ok()) {
    return Status::Malformed(fmt::format("scheduler data dir {}: reading the federated state: {}",
                                         dir_, it->status().ToString()));
  }
  fed_ = std::move(fed);
  return Status();
}

Status SchedulerStore::Save(const proto::SchedulerState& state) {
  proto::SchedulerState s = state;
  s.set_format(kFormat);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  rocksdb::Status put = db_->Put(sync, kStateKey, s.SerializeAsString());
  if (!put.ok()) {
    return Status::Internal(
        fmt::format("scheduler data dir {}: saving the state: {}", dir_, put.ToString()));
  }
  state_ = std::move(s);
  return Status();
}

Status SchedulerStore::SaveFed(const proto::FedRoundsState& state) {
  rocksdb::WriteBatch batch;
  std::map<int32_t, std::string> clients;
  for (const proto::FedClientState& c : state.clients()) {
    std::string bytes = c.SerializeAsString();
    auto old = fed_clients_.find(c.id());
    if (old == fed_clients_.end() || old->second != bytes) batch.Put(FedClientKey(c.id()), bytes);
    clients[c.id()] = std::move(bytes);
  }
  for (const auto& [id, bytes] : fed_clients_) {
    if (!clients.contains(id)) batch.Delete(FedClientKey(id));
  }
  proto::FedRoundsState core = state;
  core.clear_clients();
  // Compared without when it was saved: a save that changes nothing writes nothing.
  core.clear_saved_unix_s();
  core.clear_saved_now_s();
  std::string core_bytes = core.SerializeAsString();
  if (core_bytes == fed_core_ && batch.Count() == 0) return Status();
  core.set_saved_unix_s(state.saved_unix_s());
  core.set_saved_now_s(state.saved_now_s());
  batch.Put(kFedKey, core.SerializeAsString());
  rocksdb::WriteOptions sync;
  sync.sync = true;
  rocksdb::Status put = db_->Write(sync, &batch);
  if (!put.ok()) {
    return Status::Internal(
        fmt::format("scheduler data dir {}: saving the federated state: {}", dir_, put.ToString()));
  }
  fed_core_ = std::move(core_bytes);
  fed_clients_ = std::move(clients);
  return Status();
}

}  // namespace hetps
