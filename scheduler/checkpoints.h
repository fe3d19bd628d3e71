// Checkpoints: the scheduler's side of whole-run checkpoints (common/cut.h). A cut is taken at
// one clock boundary C on every server at once: the scheduler asks every live server for C,
// each writes its partitions once every live worker finished clock C - 1, holding back requests
// of clock C and later until its part is in hand, so the cut holds every update of the clocks
// before C and none after, on every server. Then the scheduler writes the manifest, which
// makes the cut complete, and removes old cuts.
//
// Choosing C: on request, the furthest clock the scheduler heard of (workers waiting there are
// cut at once). A server that already served a request of clock C refuses (with the furthest
// clock it served); the attempt is called off on every server and retried one past it, then
// further ahead each time; so is one whose server died. `hetps ctl
// checkpoint` asks for one now; with every_clocks = N, cuts are taken at clocks N, 2N, ...
//
// Thread-safety: none; owned by the scheduler's loop.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "durable.pb.h"
#include "hetps.pb.h"
#include "scheduler/barrier.h"

namespace hetps {

struct CheckpointOptions {
  std::string dir;           // <dir>/clock-<C>/; empty: checkpoints are refused
  int64_t every_clocks = 0;  // 0: only on request
  int keep = 2;              // complete cuts kept (0: all)
};

class Checkpoints {
 public:
  struct Actions {
    std::function<void(int32_t server, const proto::Header& h)> send;
    std::function<void(const Arrival& to, const proto::Header& h)> reply;  // to an operator
    std::function<std::vector<int32_t>()> live_servers;
    // The manifest's description of the cluster: node counts, shard map, policy.
    std::function<proto::CutManifest()> describe;
    // A cut is complete (clock, dir, bytes, the slowest server's writing time); may be empty.
    std::function<void(const proto::Cut& cut)> completed;
  };
  Checkpoints(CheckpointOptions options, Actions actions);
  Checkpoints(const Checkpoints&) = delete;
  Checkpoints& operator=(const Checkpoints&) = delete;

  bool enabled() const { return !options_.dir.empty(); }

  // An operator's request (hetps ctl checkpoint): answered with CHECKPOINT once a cut is
  // complete, or with an error. A periodic cut still waiting for its clock is called off for it
  // (the periodic schedule goes on after).
  void Request(const Arrival& requester, double now);
  // Every turn of the loop: starts the cut that is due. `clock`: the furthest clock the
  // scheduler heard of; `ready`: the shard map is installed and workers are running.
  void Tick(int64_t clock, bool ready, double now);
  // A server's CHECKPOINT_DONE or ERROR to a CHECKPOINT.
  void OnAnswer(int32_t server, const proto::Header& h, double now);
  void OnServerDead(int32_t server, double now);
  // Every worker finished: a cut under way is called off (its clock will never be reached;
  // the state is final) and none is started.
  void Abandon(double now);
  // The cluster shuts down: operators still waiting are told so.
  void Shutdown();

 private:
  struct Attempt {
    uint64_t id = 0;
    int64_t clock = 0;
    std::set<int32_t> asked, waiting;
    int64_t bytes = 0;
    double seconds = 0;  // the slowest server's writing time
    double started = 0;
    bool periodic = false;
    Status failed;  // a server could not write its part
  };
  void Start(int64_t clock, bool periodic, double now);
  // Tells every server asked to forget the attempt; retried further ahead if `retry`.
  void CallOff(const char* why, double now, bool retry = true);
  void Complete(double now);
  void Fail(const Status& s);

  CheckpointOptions options_;
  Actions actions_;
  std::optional<Attempt> attempt_;
  std::vector<Arrival> requesters_;
  uint64_t next_id_ = 1;
  int tries_ = 0;              // attempts called off in a row
  int64_t floor_ = 0;          // the next cut's clock is above this
  double retry_at_ = 0;        // no new attempt before
  int64_t next_periodic_ = 0;  // every_clocks: the next cut's clock
};

}  // namespace hetps
