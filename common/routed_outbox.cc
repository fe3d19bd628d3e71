#include "common/routed_outbox.h"

#include <spdlog/spdlog.h>

#include "common/message.h"

namespace hetps {

RoutedOutbox::RoutedOutbox(zmq::socket_t& router, size_t max_held)
    : router_(router), max_held_(max_held) {
  router_.set(zmq::sockopt::router_mandatory, 1);
  router_.set(zmq::sockopt::sndtimeo, 0);
}

RoutedOutbox::Outcome RoutedOutbox::Send(const std::string& identity, const proto::Header& h,
                                         const std::function<bool()>& hold) {
  auto it = held_.find(identity);
  if (it == held_.end() && SendRouted(router_, identity, h)) return Outcome::kSent;
  if (!hold()) return Outcome::kDropped;
  std::deque<proto::Header>& queue = held_[identity];
  if (queue.size() >= max_held_) {
    spdlog::warn("{} messages held for {}, which is not taking them: dropping the oldest ({})",
                 queue.size(), identity, proto::MsgType_Name(queue.front().type()));
    queue.pop_front();
    --held_count_;
  }
  queue.push_back(h);
  ++held_count_;
  return Outcome::kHeld;
}

size_t RoutedOutbox::Flush() {
  size_t sent = 0;
  for (auto it = held_.begin(); it != held_.end();) {
    std::deque<proto::Header>& queue = it->second;
    while (!queue.empty() && SendRouted(router_, it->first, queue.front())) {
      queue.pop_front();
      --held_count_;
      ++sent;
    }
    it = queue.empty() ? held_.erase(it) : std::next(it);
  }
  return sent;
}

void RoutedOutbox::Forget(const std::string& identity) {
  auto it = held_.find(identity);
  if (it == held_.end()) return;
  held_count_ -= it->second.size();
  held_.erase(it);
}

size_t RoutedOutbox::held_for(const std::string& identity) const {
  auto it = held_.find(identity);
  return it == held_.end() ? 0 : it->second.size();
}

}  // namespace hetps
