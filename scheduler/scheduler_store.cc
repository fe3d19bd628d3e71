#include "scheduler/scheduler_store.h"

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <filesystem>

#include "common/data_dir.h"

namespace hetps {
namespace {

constexpr int kFormat = 1;
constexpr char kStateKey[] = "scheduler";

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
  return store;
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

}  // namespace hetps
