// ApplyThreads: the threads that own a server's large partitions (partition id mod threads),
// reached from the network thread over inproc sockets. A hand-over passes the request as a C++
// struct (DataRequest, or a closed round) by pointer, payload frames included, so nothing is
// copied or re-serialized; replies come back over one inproc PULL socket that the network
// thread polls (replies()) and forwards to the workers.
//
// Thread-safety: every method but the threads' own loop is called from the network thread.
// The queues are FIFO per thread, so a round handed over after a push is applied after it,
// and before any read handed over later.
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "server/cut_file.h"
#include "server/serving.h"

namespace hetps {

class ApplyThreads {
 public:
  // Binds the sockets. `context` must outlive this object.
  ApplyThreads(zmq::context_t& context, int threads);
  ApplyThreads(const ApplyThreads&) = delete;
  ApplyThreads& operator=(const ApplyThreads&) = delete;
  ~ApplyThreads() { Stop(); }

  // Starts the threads. REQUIRES: `state` is complete (shard map installed) and outlives them.
  void Start(const ServingState& state);
  // Hands a request to apply thread `index` (0-based).
  void Hand(int index, DataRequest request);
  // Every thread applies `round` to the partitions it owns.
  void Broadcast(const RoundSpec& round);
  // Every thread writes its partitions' part of a whole-run checkpoint (after everything handed
  // over before).
  void WriteCut(const std::shared_ptr<CutJob>& job);
  // Runs `task` on apply thread `index`, after everything handed to it before; the task may
  // send [identity, header, payload...] messages on the socket it is given (they go out like
  // replies).
  void Run(int index, std::function<void(zmq::socket_t& replies)> task);
  // The endpoint replies() binds: other threads connect a PUSH socket to it to send replies.
  static constexpr char kRepliesEndpoint[] = "inproc://server-replies";
  // Replies ready for the workers: [identity, header, payload...] multipart messages.
  zmq::socket_t& replies() { return replies_; }
  // Stops and joins the threads (idempotent).
  void Stop();

 private:
  struct Work;
  void Send(int index, std::unique_ptr<Work> work);
  static void Loop(zmq::context_t& context, int index, const ServingState& state);

  zmq::context_t& context_;
  zmq::socket_t replies_;
  std::vector<zmq::socket_t> work_;
  std::vector<std::thread> threads_;
};

}  // namespace hetps
