// SchedulerLink: a node's control-plane connection to the scheduler. It registers the node,
// waits for the cluster view, and sends heartbeats; afterwards the owner polls socket() in its
// own loop and handles control messages (NODE_DEAD, SHARD_MAP, SHUTDOWN, ...) itself.
//
// Thread-safety: none; owned and used by the one thread that owns the node's sockets.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <zmq.hpp>

#include "common/auth.h"
#include "common/cluster_view.h"
#include "common/message.h"
#include "common/status.h"

namespace hetps {

class SchedulerLink {
 public:
  // `context` must outlive the link. `address` is what other nodes connect to (servers) or
  // empty (workers). With auth.curve the connection is encrypted, proves auth.own and accepts
  // only a scheduler holding auth.scheduler_public's secret.
  SchedulerLink(zmq::context_t& context, const std::string& scheduler_endpoint, proto::Role role,
                std::string address, int heartbeat_interval_ms, const Auth& auth = Auth());
  SchedulerLink(const SchedulerLink&) = delete;
  SchedulerLink& operator=(const SchedulerLink&) = delete;

  // Extra fields of the REGISTER message (a server sets its policy), before Join.
  proto::Header& registration() { return registration_; }
  // Registers and blocks until the cluster view arrives. Fails on an error reply, on SHUTDOWN,
  // when `stop` becomes true, or after `timeout_ms`.
  Status Join(const std::atomic<bool>& stop, int timeout_ms);

  int32_t id() const { return id_; }
  int32_t rank() const { return rank_; }
  // A server the scheduler admitted as a backup (standby), whether it asked to be one or not.
  bool admitted_standby() const { return admitted_standby_; }
  const ClusterView& view() const { return view_; }
  ClusterView& view() { return view_; }
  zmq::socket_t& socket() { return socket_; }

  // Sends `header` (sender filled in) to the scheduler without blocking.
  void Send(proto::Header header);
  // Sends a heartbeat when one is due; call on every turn of the owner's loop.
  bool MaybeHeartbeat();  // true: it sent one
  // Fills each heartbeat's report (a worker's or server's figures for the scheduler's status),
  // on the owner's thread. Reports ride on heartbeats: no extra message, no extra round trip.
  void SetReporter(std::function<void(proto::Header&)> reporter) {
    reporter_ = std::move(reporter);
  }
  // Records that a message from the scheduler arrived; the owner calls it for every one.
  void Heard() { last_heard_ = std::chrono::steady_clock::now(); }
  // True once the scheduler has been silent for longer than the heartbeat timeout it announced
  // in the cluster view (it answers every heartbeat, so silence means it is gone), or, when it
  // keeps its state (a --data_dir), than the recovery timeout it announced: it may be restarted
  // meanwhile, and the node carries on without it.
  bool SchedulerLost();
  // For each message from the scheduler: true when it shows that the scheduler was restarted
  // (another incarnation than the one it joined); what it had not answered must be sent again.
  bool SchedulerRestarted(const proto::Header& h);

 private:
  zmq::socket_t socket_;
  proto::Role role_;
  std::string address_;
  std::chrono::milliseconds heartbeat_interval_;
  std::chrono::steady_clock::time_point last_heartbeat_{};
  std::chrono::steady_clock::time_point last_heard_{};
  proto::Header registration_;
  std::function<void(proto::Header&)> reporter_;
  int32_t id_ = -1;
  int32_t rank_ = -1;
  bool admitted_standby_ = false;
  ClusterView view_;
  uint64_t scheduler_incarnation_ = 0;  // 0: none heard yet
  bool silence_logged_ = false;
  Status setup_;  // what Join reports when the socket could not be set up
};

}  // namespace hetps
