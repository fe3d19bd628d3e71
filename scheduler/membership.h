// Membership: the scheduler's table of nodes. It assigns ids (scheduler 0, then 1, 2, ... in
// order of registration) and per-role ranks, tracks liveness from any message a node sends, and
// declares a node dead once it has been silent for longer than the heartbeat timeout.
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "durable.pb.h"
#include "hetps.pb.h"

namespace hetps {

using SteadyTime = std::chrono::steady_clock::time_point;

struct Member {
  enum class State { kAlive, kLeft, kDead };
  proto::NodeInfo info;
  std::string identity;  // routing identity of its scheduler connection
  SteadyTime last_seen;
  State state = State::kAlive;
  bool took_over = false;    // a server that took over a dead server's rank
  int32_t replaces = 0;      // then: the dead server's id
  bool joined_late = false;  // a worker that joined the running cluster
  bool superseded = false;   // a dead node whose rank another took over (or a departed worker's)
  // A backup (info.standby, --replicas): it installed the shard map, the primary it follows
  // (and at which epoch), and the epoch at which it said it holds every partition of its rank
  // (-1: not yet).
  bool has_map = false;
  int32_t follows = -1;  // the primary it said it follows, at follows_epoch
  int64_t follows_epoch = -1;
  int64_t synced_epoch = -1;
  // Live re-sharding: the shard map epoch this node was last sent (-1: none since this
  // scheduler started); a live node behind the map's epoch is sent the map again.
  int64_t map_epoch = -1;
  bool new_rank = false;  // a server that grew the cluster, until its rank is announced
};

class Membership {
 public:
  // The cluster forms once `num_servers` servers and `num_workers` workers registered; then
  // workers may join and leave while it runs, at most `max_workers` live at a time.
  Membership(int num_servers, int num_workers, int max_workers, int num_aggregators = 0);

  // Admits a node, or returns the member already registered under `identity` (a retried
  // REGISTER). Its rank is the one it asked for (request.rank, when set) or the smallest free
  // one. A server may ask for the rank of a server that was declared dead: it takes that rank
  // over (a restart on its data dir; the dead member stays dead, superseded). Once the cluster
  // formed, a worker joins late: under the rank it asks for, unless a live worker holds it (a
  // restarted worker replaces its dead or departed self), or under the smallest rank no live or
  // dead worker holds. Fails when the role is full, the rank is held by a live node (Unavailable
  // after the cluster formed: retry once it is declared dead) or out of range, or the request
  // is unusable.
  StatusOr<const Member*> Register(const std::string& identity, const proto::Header& request,
                                   SteadyTime now);
  // Backups per server rank the cluster takes (--replicas; 0: none).
  void set_replicas(int replicas) { replicas_ = replicas; }
  // Elastic ranks (docs/resharding.md): once the cluster is complete, a server that asks for no
  // rank (or a rank past the last) while every rank is served becomes a new rank, up to
  // `max_servers` (0: fixed). num_servers() counts the ranks so far.
  void set_max_servers(int max_servers) { max_servers_ = max_servers; }
  int num_servers() const { return num_servers_; }
  // Whether `m` joined as a rank past the ones the cluster formed with, not yet announced.
  bool NewRank(const Member& m) const { return m.new_rank; }
  void Announced(Member& m) { m.new_rank = false; }
  int replicas() const { return replicas_; }
  // The live primary of server rank `rank` (nullptr: none), and its live backups.
  const Member* Primary(int32_t rank) const;
  std::vector<Member*> Backups(int32_t rank);
  // The backup `backup` takes over the rank of its primary `dead` (dead, or drained; it is
  // superseded), and back when the backup could not (Demote: `dead` is the primary again).
  void Promote(Member& backup, Member& dead);
  void Demote(Member& backup, Member& primary);
  // True once every expected server and worker has registered.
  bool complete() const {
    return servers_ == num_servers_ && workers_ == num_workers_ && aggregators_ == num_aggregators_;
  }
  // Every node, but servers superseded by a restart; with `alive_only`, only live nodes.
  proto::ClusterView View(bool alive_only = false) const;
  // Whether `m` took over the rank of a dead server.
  bool TookOver(const Member& m) const { return m.took_over; }
  // Whether `m` is a worker that joined the running cluster.
  bool JoinedLate(const Member& m) const { return m.joined_late; }

  Member* ByIdentity(const std::string& identity);
  Member* ById(int32_t id);
  // Records that `identity` was heard from; returns its member if registered.
  Member* Touch(const std::string& identity, SteadyTime now);
  // Declares dead every live node silent for longer than `timeout`; returns their ids.
  std::vector<int32_t> ExpireSilent(SteadyTime now, std::chrono::milliseconds timeout);
  void MarkLeft(int32_t id);
  void MarkDead(int32_t id);  // gone without being silent (a primary retired by a hand-over)

  // For a scheduler's data dir: every member as a record, and a table rebuilt from them (each
  // live member counts as heard from at `now`, so one that died meanwhile expires as usual).
  std::vector<proto::SchedulerMember> Save() const;
  Status Restore(const std::vector<proto::SchedulerMember>& members, SteadyTime now);
  // Every member ever admitted, superseded ones included, by id - 1.
  const std::deque<Member>& members() const { return members_; }

  // Members in the alive state (any role).
  std::vector<const Member*> Alive() const;
  // Ids of workers that are alive (not left, not dead).
  std::vector<int32_t> LiveWorkers() const;
  std::vector<int32_t> LiveServers() const;
  // Every expected worker joined and has since left or died.
  bool AllWorkersDone() const;

 private:
  Member* DeadServer(int32_t rank);  // the dead, not yet superseded server of `rank`, if any
  // A backup (request.replica.standby): of the rank asked for, else of the rank with the fewest
  // live backups, at most replicas_ per rank.
  StatusOr<const Member*> RegisterAggregator(const std::string& identity,
                                             const proto::Header& request, SteadyTime now);
  StatusOr<const Member*> RegisterStandby(const std::string& identity, const proto::Header& request,
                                          SteadyTime now);
  const Member* TakeOver(Member& dead, const std::string& identity, const proto::Header& request,
                         SteadyTime now);
  StatusOr<const Member*> JoinLate(const std::string& identity, const proto::Header& request,
                                   SteadyTime now);
  Member& Add(const std::string& identity, const proto::Header& request, int32_t rank,
              SteadyTime now);

  int num_servers_, num_workers_, max_workers_;
  int replicas_ = 0;
  int max_servers_ = 0;
  int num_aggregators_ = 0;
  int servers_ = 0, workers_ = 0, aggregators_ = 0;
  std::set<int32_t> server_ranks_, worker_ranks_;
  std::deque<Member> members_;  // index = id - 1; deque: pointers stay valid as nodes join
  // Routing identity -> index of the first member with it (every message is looked up).
  std::unordered_map<std::string, size_t> by_identity_;
};

}  // namespace hetps
