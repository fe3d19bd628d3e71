#include "cli/scheduler_call.h"

#include <fmt/format.h>

#include <zmq.hpp>

#include "common/message.h"

namespace hetps {

StatusOr<proto::Header> CallScheduler(const std::string& scheduler, proto::Header request,
                                      int timeout_ms) {
  zmq::context_t ctx(1);
  zmq::socket_t socket(ctx, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, timeout_ms);
  try {
    socket.connect(scheduler);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(fmt::format("cannot connect to '{}': {}", scheduler, e.what()));
  }
  request.set_sender(-1);
  request.set_request_id(1);
  Send(socket, request);
  auto env = Receive(socket, zmq::recv_flags::none, /*routed=*/false);
  if (!env) {
    return Status::DeadlineExceeded(
        fmt::format("no answer from {} in {} ms", scheduler, timeout_ms));
  }
  if (!env->status.ok()) return env->status;
  if (Status s = StatusOf(env->message.header); !s.ok()) return s;
  return std::move(env->message.header);
}

}  // namespace hetps
