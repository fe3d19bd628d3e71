// Replicator: a primary's side of replication (--replicas; docs/replication.md). The owning
// thread of each partition hands it every log record as it logs it (Ship) and, for a backup
// new to the set, the partition's whole state first (ShipSnapshot); its own thread sends them,
// in that order, to each backup over one connection per backup, counts the backups'
// acknowledgements, and releases a worker's reply only once every backup the record went to
// acknowledged it. A record of a partition goes to the backups that hold its snapshot; a
// backup's snapshot of a partition contains every record shipped before it.
//
// A backup that answers with an error follows a newer primary: this one is fenced, fails every
// update it did not get acknowledged, and must stop serving (fenced()).
//
// Thread-safety: Ship and ShipSnapshot from any owning thread; SetBackups, fenced() and the
// rest from the network thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include "common/auth.h"
#include "durable.pb.h"
#include "hetps.pb.h"

namespace hetps {

class PartitionState;

class Replicator {
 public:
  // `replies`: the inproc endpoint whose messages ([identity, header, payload...]) the network
  // thread forwards to the workers. `self`: this server's node id. `auth` (may be null; must
  // outlive this): with CURVE, each backup is dialled with this server's key, expecting the
  // backup's.
  Replicator(zmq::context_t& context, std::string replies, int32_t self,
             const Auth* auth = nullptr);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // The rank's backups now, at the primary's `epoch`. Returns the node ids new to the set:
  // every partition's owner must ShipSnapshot to them (before or after its next records).
  std::vector<int32_t> SetBackups(const std::vector<proto::NodeInfo>& backups, int64_t epoch);
  // Whether any backup is in the set (records are shipped at all).
  bool active() const { return active_.load(std::memory_order_acquire); }
  bool fenced() const { return fenced_.load(std::memory_order_acquire); }
  const std::string& fenced_reason() const { return fenced_reason_; }  // once fenced()

  // A logged record of partition `pid` (with its `n` floats), shipped to every backup that
  // holds the partition. `frame`, when it holds exactly the floats, is shared (ZeroMQ counts
  // its references) instead of copied. With `identity`, `reply` (a worker's answer: header
  // and payload frames) goes to it once each of them acknowledged.
  void Ship(int32_t pid, const proto::LogRecord& record, const float* values, int64_t n,
            zmq::message_t* frame = nullptr, const std::string& identity = {},
            proto::Header* reply = nullptr, std::vector<zmq::message_t>* payload = nullptr);
  // `part`'s whole state to the backups `to` (from SetBackups). REQUIRES: called by its owner.
  void ShipSnapshot(const PartitionState& part, const std::vector<int32_t>& to);

  // Whether every record and snapshot handed over so far was acknowledged by every backup it
  // went to (or released without them): a drained primary holds nothing its backups lack.
  bool settled() const { return unsettled_.load(std::memory_order_acquire) == 0; }

  // Shipped and acknowledged records, for reports.
  int64_t shipped() const { return shipped_.load(std::memory_order_relaxed); }
  int64_t shipped_bytes() const { return shipped_bytes_.load(std::memory_order_relaxed); }

 private:
  struct Item;
  struct Backup;
  struct Pending;
  void Enqueue(std::unique_ptr<Item> item);
  void Loop();
  void Handle(std::unique_ptr<Item> item);
  void Send(Item& item);
  void OnAck(Backup& backup, const proto::Header& h);
  void Drop(int32_t backup);
  void Fence(const std::string& why);

  zmq::context_t& context_;
  const std::string replies_endpoint_;
  const int32_t self_;
  const Auth* auth_;
  std::mutex in_mu_;
  zmq::socket_t in_;         // owners -> this thread (pointers to Items), guarded by in_mu_
  std::set<int32_t> known_;  // the backup set as the network thread last set it
  std::atomic<bool> active_{false}, fenced_{false};
  std::string fenced_reason_;  // written before fenced_ is set
  std::atomic<int64_t> shipped_{0}, shipped_bytes_{0};
  std::atomic<int64_t> unsettled_{0};  // records and snapshots handed over, not yet released
  // Owned by the thread:
  std::vector<std::unique_ptr<Backup>> backups_;
  std::unordered_map<uint64_t, std::unique_ptr<Pending>> pending_;  // by shipment
  uint64_t next_seq_ = 1;
  int64_t epoch_ = 0;
  std::thread thread_;
};

}  // namespace hetps
