#include "cli/scheduler_call.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <zmq.hpp>

#include "cli/run_keys.h"
#include "common/message.h"

namespace hetps {

OperatorAuth OperatorAuth::FromEnvironment() {
  OperatorAuth a;
  if (const char* v = std::getenv("HETPS_AUTH"); v != nullptr && *v != '\0') a.flags.mode = v;
  if (const char* v = std::getenv("HETPS_KEYS"); v != nullptr) a.flags.keys_dir = v;
  if (const char* v = std::getenv("HETPS_KEY"); v != nullptr) a.flags.key_name = v;
  return a;
}

bool OperatorAuth::TakeArg(const std::string& arg) {
  for (auto [prefix, field] :
       {std::pair{"--auth=", &flags.mode}, std::pair{"--keys=", &flags.keys_dir},
        std::pair{"--key=", &flags.key_name}, std::pair{"--run_dir=", &run_dir}}) {
    if (arg.starts_with(prefix)) {
      *field = arg.substr(std::string_view(prefix).size());
      return true;
    }
  }
  return false;
}

Status OperatorAuth::UseRun(std::string& scheduler) {
  if (run_dir.empty()) return Status();
  if (scheduler.empty()) {
    std::ifstream in(RunEndpointFile(run_dir));
    if (!(in >> scheduler)) {
      return Status::NotFound(
          fmt::format("{}: no scheduler endpoint there (is it the folder of a hetps launch run?)",
                      RunEndpointFile(run_dir)));
    }
  }
  std::error_code ec;
  if ((flags.mode.empty() || flags.mode == "none") &&
      std::filesystem::exists(RunKeysDir(run_dir) + "/operator.key", ec)) {
    flags.mode = "curve";
    flags.keys_dir = RunKeysDir(run_dir);
  }
  return Status();
}

StatusOr<Auth> OperatorAuth::Load() const {
  AuthFlags f = flags;
  if (f.key_name.empty()) f.key_name = "operator";
  return LoadAuth(f, std::nullopt);
}

StatusOr<proto::Header> CallScheduler(const std::string& scheduler,
                                      const OperatorAuth& operator_auth, proto::Header request,
                                      int timeout_ms) {
  auto auth = operator_auth.Load();
  if (!auth.ok()) return auth.status();
  zmq::context_t ctx(1);
  zmq::socket_t socket(ctx, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, timeout_ms);
  if (Status s = auth->SecureClient(socket, auth->scheduler_public); !s.ok()) return s;
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
    return Status::DeadlineExceeded(fmt::format(
        "no answer from {} in {} ms{}", scheduler, timeout_ms,
        auth->curve ? " (with --auth=curve: is the key in the scheduler's allow-list, and "
                      "scheduler.pub the scheduler's?)"
                    : ""));
  }
  if (!env->status.ok()) return env->status;
  if (Status s = StatusOf(env->message.header); !s.ok()) return s;
  return std::move(env->message.header);
}

}  // namespace hetps
