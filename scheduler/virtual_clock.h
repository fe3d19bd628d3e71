// VirtualClock: the order of a federated run's events in virtual time (--clock=virtual,
// docs/virtual-time.md). Clients do their real work as fast as the host allows, but each
// request carries the virtual time at which it happens (a check-in: when the client is idle and
// online; an upload report: selection time + download + compute + upload, from its device and
// link models), and the scheduler acts on requests in virtual-time order, never in arrival order.
//
// The conservative release rule: a participant (a live worker: client or evaluator) is either
// waiting (it sent a request nobody has answered yet) or working (it was answered at virtual
// time b, or it has not sent anything yet: b = -inf; its next request will carry a time >= b).
// A held request at time t is released only when t < b of every working participant, so no
// request that can still arrive is earlier; ties of time go by rank, then by arrival. A
// participant answered "finished" sends no more requests and no longer counts; one that died or
// left is removed with its held requests. Nothing is held forever: every working participant
// either sends its next request (real work, bounded) or dies.
//
// Data-centre training (VIRTUAL_TURN) uses the same rule for workers' turns: a worker waits
// from its turn request until the turn is granted, works from the grant, and waits again while
// a server parks its request for slower workers (until the turn that releases it ends).
//
// Timers (round deadlines, the first round's wait) are events too: the caller asks for the next
// one and fires it when it is earlier than every held request and every working bound.
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hetps.pb.h"
#include "scheduler/barrier.h"

namespace hetps {

class VirtualClock {
 public:
  static constexpr double kNever = std::numeric_limits<double>::infinity();

  struct Event {
    double t = 0;
    int rank = 0;
    uint64_t seq = 0;  // arrival order, for equal (t, rank)
    proto::MsgType type = proto::ROUND_CHECKIN;
    Arrival arrival;
    proto::FedRound request;
  };

  // The virtual time of the latest released event or fired timer (0 before any).
  double now() const { return now_; }

  // Worker `arrival.worker` (of `rank`) sent `request` of `type` at virtual time t: held until
  // released; the worker now waits. A time earlier than now() is taken as now() (a client
  // cannot act in the past; it would only happen to a client that mis-counts its time).
  void Hold(proto::MsgType type, const Arrival& arrival, int rank, double t,
            proto::FedRound request);
  // The worker sent a request that is answered without ordering (an evaluator's watch): it
  // waits for the answer.
  void Waits(int32_t worker) { state_[worker] = kWaiting; }
  // The worker was answered at now(): it works from there on (finished: it sends no more).
  void Answered(int32_t worker, bool finished);
  // The worker's next request will come at t or later (ROUND_PROGRESS): a working worker's bound
  // rises to t; a parked one (whose request a server answered, which it may say before the turn
  // that released it ends) works from t. Nothing for a worker that has not spoken.
  void Declare(int32_t worker, double t);
  // A server parked the request of the worker's turn until slower workers catch up: it waits
  // (it cannot act before another turn releases it).
  void Parked(int32_t worker);
  // The parked worker's request was answered at now() (by the turn that ends): it works from
  // now() on. Nothing for one that is not parked (it declared already, and may wait again for
  // its next turn), finished or left.
  void Unparked(int32_t worker);
  // The worker died or left: its bound and held requests go.
  void Remove(int32_t worker);

  // The smallest bound over the working participants among `live` (kNever: none works).
  double Bound(const std::vector<int32_t>& live) const;
  // The earliest held event, if it may be released now (its time < Bound(live), and not after
  // `not_after`: a timer due earlier fires first); removes it and advances now() to its time.
  std::optional<Event> Release(const std::vector<int32_t>& live, double not_after = kNever);
  // Takes out of order every held event `take` accepts (an over-committed secure round's late
  // holders: their reveal does not depend on when they report, scheduler_virtual.cc), in time
  // order. Their workers still wait for the answer.
  template <typename Pred>
  std::vector<Event> Take(Pred take) {
    std::vector<Event> out;
    for (auto it = held_.begin(); it != held_.end();) {
      if (take(it->second)) {
        out.push_back(std::move(it->second));
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }
  // A timer due at `t` may fire now: t is earlier than every held event and every working bound
  // (a timer at the time of a held event fires after it). Advances now() to t when it may.
  bool Fire(double t, const std::vector<int32_t>& live);

  size_t held() const { return held_.size(); }
  // Who blocks the clock (for logs and /api/status): the working participants at the bound.
  std::vector<int32_t> Blocking(const std::vector<int32_t>& live) const;

 private:
  static constexpr double kWaiting = kNever;
  struct Key {
    double t;
    int rank;
    uint64_t seq;
    bool operator<(const Key& o) const {
      if (t != o.t) return t < o.t;
      if (rank != o.rank) return rank < o.rank;
      return seq < o.seq;
    }
  };
  double now_ = 0;
  uint64_t seq_ = 0;
  std::map<Key, Event> held_;
  // Per participant: kWaiting, or the virtual time it was last answered at (working). A live
  // worker with no entry has not sent anything: it works with bound -inf.
  std::map<int32_t, double> state_;
  std::set<int32_t> finished_;
  std::set<int32_t> parked_;  // waiting for a server, not for a held request
};

}  // namespace hetps
