#include "aggregator/group_sum.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace hetps {

namespace {

bool Holds(const GroupSum::Sum& s, int32_t w) {
  return std::any_of(s.waiters.begin(), s.waiters.end(),
                     [&](const GroupSum::Waiter& x) { return x.worker == w; });
}

void Join(GroupSum::Sum& s, const proto::Header& h, const std::string& identity,
          std::span<const float> values) {
  if (s.waiters.empty()) {
    s.values.assign(values.begin(), values.end());
    s.clock = h.clock();
    s.base_version = h.version();
  } else {
    for (size_t i = 0; i < values.size(); ++i) s.values[i] += values[i];
    s.clock = std::min(s.clock, h.clock());
    s.base_version = std::min(s.base_version, h.version());
  }
  // A push without a sample count counts as one sample, as the servers' weighted means take it.
  const double weight = h.weight() > 0 ? h.weight() : 1.0;
  s.weight += weight;
  if (h.has_loss()) {
    s.loss = (s.loss.value_or(0) * s.losses + h.loss()) / (s.losses + 1);
    ++s.losses;
  }
  proto::Contribution& c = s.contributions.emplace_back();
  c.set_worker(h.sender());
  c.set_incarnation(h.incarnation());
  c.set_seq(h.seq());
  c.set_weight(weight);
  s.waiters.push_back({identity, h.request_id(), h.sender(), h.clock()});
}

}  // namespace

GroupSum::GroupSum(Options options)
    : options_(std::move(options)), live_(options_.group.begin(), options_.group.end()) {}

StatusOr<std::vector<GroupSum::Sum>> GroupSum::Add(const proto::Header& h,
                                                   const std::string& identity,
                                                   std::span<const float> values, double now) {
  const int32_t w = h.sender();
  if (!live_.contains(w)) {
    return Status::FailedPrecondition(
        fmt::format("worker {} is not in this aggregator's group (or left it); push directly", w));
  }
  if (h.seq() <= 0 || h.incarnation() == 0) {
    return Status::InvalidArgument(
        fmt::format("worker {}'s push of partition {} is not numbered (incarnation, seq): an "
                    "aggregator sums only numbered pushes",
                    w, h.partition()));
  }
  if (values.empty()) {
    return Status::InvalidArgument(fmt::format("worker {} pushed no values", w));
  }
  std::deque<Sum>& sums = open_[{h.partition(), options_.by_clock ? h.clock() : 0}];
  if (!sums.empty() && sums.front().values.size() != values.size()) {
    const size_t want = sums.front().values.size();
    if (sums.size() == 1 && sums.front().waiters.empty()) sums.clear();
    return Status::SizeMismatch(
        fmt::format("worker {} pushed {} values of partition {}, whose open sum has {}", w,
                    values.size(), h.partition(), want));
  }
  auto it = std::find_if(sums.begin(), sums.end(), [&](const Sum& s) { return !Holds(s, w); });
  if (it == sums.end()) {
    if (open() >= options_.max_open) {
      if (sums.empty()) open_.erase({h.partition(), options_.by_clock ? h.clock() : 0});
      return Status::Unavailable(
          fmt::format("{} sums are open at this aggregator, the most it holds; push directly",
                      options_.max_open));
    }
    Sum& fresh = sums.emplace_back();
    fresh.partition = h.partition();
    fresh.rank = h.rank();
    fresh.layer = h.layer();
    fresh.opened = now;
    it = std::prev(sums.end());
  }
  if (it->rank != h.rank()) {
    return Status::InvalidArgument(
        fmt::format("worker {} sends partition {} to server rank {}, the others to rank {}", w,
                    h.partition(), h.rank(), it->rank));
  }
  Join(*it, h, identity, values);
  return TakeComplete();
}

bool GroupSum::Complete(const Sum& s) const {
  return std::all_of(live_.begin(), live_.end(), [&](int32_t w) { return Holds(s, w); });
}

// Only the front sum of each key may leave: a worker's next push of the key waits behind it.
std::vector<GroupSum::Sum> GroupSum::TakeComplete() {
  std::vector<Sum> out;
  for (auto it = open_.begin(); it != open_.end();) {
    std::deque<Sum>& sums = it->second;
    while (!sums.empty() && !sums.front().waiters.empty() && Complete(sums.front())) {
      out.push_back(std::move(sums.front()));
      sums.pop_front();
    }
    it = sums.empty() ? open_.erase(it) : std::next(it);
  }
  return out;
}

std::vector<GroupSum::Sum> GroupSum::Due(double now) {
  std::vector<Sum> out;
  for (auto it = open_.begin(); it != open_.end();) {
    std::deque<Sum>& sums = it->second;
    while (!sums.empty() && now - sums.front().opened >= options_.wait_s) {
      out.push_back(std::move(sums.front()));
      sums.pop_front();
      // The next sum of the key has waited since it opened; it leaves on its own time.
    }
    it = sums.empty() ? open_.erase(it) : std::next(it);
  }
  return out;
}

std::vector<GroupSum::Sum> GroupSum::Forget(int32_t w) {
  live_.erase(w);
  return TakeComplete();
}

std::vector<GroupSum::Sum> GroupSum::TakeAll() {
  std::vector<Sum> out;
  for (auto& [key, sums] : open_) {
    for (Sum& s : sums) out.push_back(std::move(s));
  }
  open_.clear();
  return out;
}

double GroupSum::NextDue(double now) const {
  double first = std::numeric_limits<double>::infinity();
  for (const auto& [key, sums] : open_) {
    if (!sums.empty()) first = std::min(first, sums.front().opened + options_.wait_s - now);
  }
  return first == std::numeric_limits<double>::infinity() ? -1 : std::max(0.0, first);
}

size_t GroupSum::open() const {
  size_t n = 0;
  for (const auto& [key, sums] : open_) n += sums.size();
  return n;
}

}  // namespace hetps
