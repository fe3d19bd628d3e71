#include "worker/delayed_link.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace hetps {

double DelayedLink::Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void DelayedLink::HoldRequest(int rank, const proto::Header& header,
                              std::vector<zmq::message_t> payload) {
  size_t bytes = header.ByteSizeLong();
  for (const zmq::message_t& m : payload) bytes += m.size();
  outbound_.push_back({shaper_.Up(bytes, Now()), rank, header, std::move(payload), {}});
}

void DelayedLink::HoldReply(int rank, Envelope reply) {
  size_t bytes = reply.message.header.ByteSizeLong();
  for (const zmq::message_t& m : reply.message.payload) bytes += m.size();
  inbound_.push_back({shaper_.Down(bytes, Now()), rank, {}, {}, std::move(reply)});
}

void DelayedLink::ReleaseDue(
    const std::function<void(int, const proto::Header&, std::vector<zmq::message_t>)>& send,
    const std::function<void(int, Envelope&)>& deliver) {
  const double now = Now();
  while (!outbound_.empty() && outbound_.front().due <= now) {
    Held h = std::move(outbound_.front());
    outbound_.pop_front();
    send(h.rank, h.header, std::move(h.payload));
  }
  while (!inbound_.empty() && inbound_.front().due <= now) {
    Held h = std::move(inbound_.front());
    inbound_.pop_front();
    deliver(h.rank, *h.reply);
  }
}

int DelayedLink::TimeoutMs(int cap_ms) const {
  double due = std::numeric_limits<double>::infinity();
  if (!outbound_.empty()) due = outbound_.front().due;
  if (!inbound_.empty()) due = std::min(due, inbound_.front().due);
  if (!std::isfinite(due)) return cap_ms;
  return static_cast<int>(std::clamp(std::ceil((due - Now()) * 1000), 0.0, double(cap_ms)));
}

void DelayedLink::Clear() {
  outbound_.clear();
  inbound_.clear();
}

}  // namespace hetps
