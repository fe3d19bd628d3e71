#include "common/scheduler_link.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

namespace hetps {
namespace {

// The host this node registers as: HETPS_HOST when set (a pod's node name in Kubernetes, so
// that the pods of one node share its aggregator: common/tier.h), else the machine's name.
std::string HostName() {
  if (const char* host = std::getenv("HETPS_HOST"); host != nullptr && *host != '\0') return host;
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

SchedulerLink::SchedulerLink(zmq::context_t& context, const std::string& scheduler_endpoint,
                             proto::Role role, std::string address, int heartbeat_interval_ms,
                             const Auth& auth)
    : socket_(context, zmq::socket_type::dealer),
      role_(role),
      address_(std::move(address)),
      heartbeat_interval_(heartbeat_interval_ms) {
  // A unique identity before registration; the scheduler maps it to the id it assigns.
  std::random_device rd;
  socket_.set(zmq::sockopt::routing_id,
              fmt::format("{}-{}-{}-{:08x}", proto::Role_Name(role), HostName(), getpid(), rd()));
  socket_.set(zmq::sockopt::linger, 0);
  setup_ = auth.SecureClient(socket_, auth.scheduler_public);
  if (!setup_.ok()) return;
  try {
    socket_.connect(scheduler_endpoint);
  } catch (const zmq::error_t& e) {
    setup_ = Status::InvalidArgument(
        fmt::format("cannot connect to the scheduler at '{}': {}", scheduler_endpoint, e.what()));
  }
}

void SchedulerLink::Send(proto::Header header) {
  header.set_sender(id_);
  hetps::Send(socket_, header, {}, /*dontwait=*/true);
}

bool SchedulerLink::MaybeHeartbeat() {
  auto now = std::chrono::steady_clock::now();
  if (now - last_heartbeat_ < heartbeat_interval_) return false;
  last_heartbeat_ = now;
  proto::Header h;
  h.set_type(proto::HEARTBEAT);
  if (reporter_ && !view_.proto().nodes().empty()) reporter_(h);
  Send(h);
  return true;
}

bool SchedulerLink::SchedulerLost() {
  const int timeout = view_.proto().heartbeat_timeout_ms();
  const int recovery = view_.proto().scheduler_recovery_timeout_ms();
  const auto silent = std::chrono::steady_clock::now() - last_heard_;
  if (timeout <= 0 || silent <= std::chrono::milliseconds(timeout)) {
    silence_logged_ = false;
    return false;
  }
  if (silent <= std::chrono::milliseconds(recovery)) {
    if (!silence_logged_) {
      spdlog::warn(
          "no word from the scheduler for {} ms; it keeps its state, so carrying on and "
          "waiting up to {} ms for it to come back",
          timeout, recovery);
      silence_logged_ = true;
    }
    return false;
  }
  return true;
}

bool SchedulerLink::SchedulerRestarted(const proto::Header& h) {
  if (h.incarnation() == 0) return false;
  const bool restarted = scheduler_incarnation_ != 0 && h.incarnation() != scheduler_incarnation_;
  scheduler_incarnation_ = h.incarnation();
  if (restarted) spdlog::warn("the scheduler was restarted; sending again what it did not answer");
  return restarted;
}

Status SchedulerLink::Join(const std::atomic<bool>& stop, int timeout_ms) {
  if (!setup_.ok()) return setup_;
  proto::Header reg = registration_;
  reg.set_type(proto::REGISTER);
  reg.set_role(role_);
  reg.set_address(address_);
  reg.set_host(HostName());
  reg.set_pid(getpid());
  Send(reg);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!stop.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::DeadlineExceeded(
          id_ < 0 ? "no answer from the scheduler (is it running at that address?)"
                  : "timed out waiting for the other nodes to join");
    }
    if (id_ >= 0) MaybeHeartbeat();
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(100));
    if (!(item.revents & ZMQ_POLLIN)) continue;
    auto env = Receive(socket_, zmq::recv_flags::dontwait, /*routed=*/false);
    if (!env || !env->status.ok()) continue;
    Heard();
    const proto::Header& h = env->message.header;
    // A scheduler restarted on its data dir knows this node once it answered the registration,
    // but not that it still waits for its view (a late worker's join in progress): ask again.
    if (SchedulerRestarted(h) && id_ >= 0) Send(reg);
    switch (h.type()) {
      case proto::REGISTER_REPLY:
        id_ = h.node();
        rank_ = h.rank();
        admitted_standby_ = h.replica().standby();
        spdlog::info("registered as {} rank {} (node id {})", proto::Role_Name(role_), rank_, id_);
        break;
      case proto::CLUSTER_VIEW:
        view_ = ClusterView(h.view());
        return Status();
      case proto::ERROR:
        if (h.error() == StatusCode::kUnavailable && id_ < 0) {  // e.g. its rank is not free yet
          spdlog::info("the scheduler says: {}; asking again", h.error_message());
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          Send(reg);
          break;
        }
        return StatusOf(h);
      case proto::SHUTDOWN:
        return Status::Aborted("the scheduler shut the cluster down");
      default:
        spdlog::debug("ignoring {} while joining", proto::MsgType_Name(h.type()));
    }
  }
  return Status::Aborted("interrupted while joining");
}

}  // namespace hetps
