#include "server/apply_threads.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "server/fault_point.h"

namespace hetps {
namespace {

std::string WorkEndpoint(int thread) { return fmt::format("inproc://server-work-{}", thread); }

}  // namespace

// One hand-over: a data request, a round, a checkpoint to write, a task, or (none) the stop
// signal.
struct ApplyThreads::Work {
  std::optional<DataRequest> request;
  std::optional<RoundSpec> round;
  std::shared_ptr<CutJob> cut;
  std::function<void(zmq::socket_t&)> task;
};

ApplyThreads::ApplyThreads(zmq::context_t& context, int threads)
    : context_(context), replies_(context, zmq::socket_type::pull) {
  replies_.bind(kRepliesEndpoint);
  for (int i = 0; i < threads; ++i) {
    work_.emplace_back(context, zmq::socket_type::push);
    work_.back().set(zmq::sockopt::sndhwm, 0);
    work_.back().bind(WorkEndpoint(i));
  }
}

void ApplyThreads::Start(const ServingState& state) {
  for (int i = 0; i < static_cast<int>(work_.size()); ++i) {
    threads_.emplace_back(Loop, std::ref(context_), i, std::cref(state));
  }
}

void ApplyThreads::Send(int index, std::unique_ptr<Work> work) {
  Work* raw = work.release();  // the receiving thread takes ownership
  (void)work_[index].send(zmq::message_t(&raw, sizeof(raw)), zmq::send_flags::none);
}

void ApplyThreads::Hand(int index, DataRequest request) {
  auto work = std::make_unique<Work>();
  work->request = std::move(request);
  Send(index, std::move(work));
}

void ApplyThreads::Broadcast(const RoundSpec& round) {
  for (int i = 0; i < static_cast<int>(work_.size()); ++i) {
    auto work = std::make_unique<Work>();
    work->round = round;
    Send(i, std::move(work));
  }
}

void ApplyThreads::WriteCut(const std::shared_ptr<CutJob>& job) {
  for (int i = 0; i < static_cast<int>(work_.size()); ++i) {
    auto work = std::make_unique<Work>();
    work->cut = job;
    Send(i, std::move(work));
  }
}

void ApplyThreads::Run(int index, std::function<void(zmq::socket_t&)> task) {
  auto work = std::make_unique<Work>();
  work->task = std::move(task);
  Send(index, std::move(work));
}

void ApplyThreads::Stop() {
  if (threads_.empty()) return;
  for (int i = 0; i < static_cast<int>(work_.size()); ++i) Send(i, std::make_unique<Work>());
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void ApplyThreads::Loop(zmq::context_t& context, int index, const ServingState& state) {
  zmq::socket_t in(context, zmq::socket_type::pull);
  in.connect(WorkEndpoint(index));
  zmq::socket_t out(context, zmq::socket_type::push);
  out.connect(kRepliesEndpoint);
  std::vector<float> scratch;
  // With a data dir, this thread checkpoints its own partitions between hand-overs (and when
  // it stops); a receive timeout lets it do so when no work arrives.
  const int owner = 1 + index;
  auto last_checkpoint = std::chrono::steady_clock::now();
  auto checkpoint_if_due = [&] {
    if (state.durable == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_checkpoint < std::chrono::milliseconds(state.checkpoint_interval_ms)) return;
    CheckpointOwned(state, owner);
    last_checkpoint = now;
  };
  if (state.durable != nullptr) {
    in.set(zmq::sockopt::rcvtimeo,
           static_cast<int>(std::min<int64_t>(state.checkpoint_interval_ms, 1000)));
  }
  while (true) {
    checkpoint_if_due();
    zmq::message_t m;
    if (!in.recv(m, zmq::recv_flags::none)) continue;  // the timeout: only checkpoints are due
    if (m.size() != sizeof(Work*)) return;
    Work* raw = nullptr;
    std::memcpy(&raw, m.data(), sizeof(raw));
    std::unique_ptr<Work> work(raw);
    if (work->round) {
      CompleteRound(state, owner, *work->round);
      continue;
    }
    if (work->task) {
      work->task(out);
      continue;
    }
    if (work->cut) {
      work->cut->Write(*state.store, owner, state.owned[owner]);
      continue;
    }
    if (!work->request) {  // the stop signal
      CheckpointOwned(state, owner);
      return;
    }
    DataRequest& request = *work->request;
    ServeData(state, request, scratch, [&](DataReply&& r) {
      (void)out.send(zmq::buffer(request.identity), zmq::send_flags::sndmore);
      hetps::Send(out, r.header, std::move(r.payload));
    });
    FaultPoint("update.replied");
  }
}

}  // namespace hetps
