// SchedulerStore: a scheduler's --data_dir. It keeps the cluster's membership (every node's id,
// role, rank, address, connection identity and state), whether the cluster formed, the shard
// map and the consistency policy, and the federated rounds' state (scheduler/fed_rounds.h), in
// RocksDB, synced before any node hears of a change. A
// scheduler restarted on it resumes the same cluster: the nodes, which keep running, reconnect
// under their identities and go on (common/scheduler_link.h).
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "durable.pb.h"

namespace rocksdb {
class DB;
}

namespace hetps {

class SchedulerStore {
 public:
  // Opens `dir`, creating it when missing or empty. A folder that holds something else, or a
  // damaged record, is refused with an error naming it.
  static StatusOr<std::unique_ptr<SchedulerStore>> Open(const std::string& dir);
  ~SchedulerStore();

  const std::string& dir() const { return dir_; }
  // What the last scheduler on this dir saved; nullopt for a new one.
  const std::optional<proto::SchedulerState>& state() const { return state_; }
  // Replaces the saved state (synced to disk).
  Status Save(const proto::SchedulerState& state);
  // The federated rounds' state the last scheduler saved; nullopt when it saved none.
  const std::optional<proto::FedRoundsState>& fed() const { return fed_; }
  // Replaces it (synced to disk). Each client's record is its own key, written only when it
  // changed, so a round's save writes what the round changed, not every client's history.
  Status SaveFed(const proto::FedRoundsState& state);

 private:
  explicit SchedulerStore(std::string dir);
  Status LoadFed();
  std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  std::optional<proto::SchedulerState> state_;
  std::optional<proto::FedRoundsState> fed_;
  std::string fed_core_;                        // as last written
  std::map<int32_t, std::string> fed_clients_;  // by client id, as last written
};

}  // namespace hetps
