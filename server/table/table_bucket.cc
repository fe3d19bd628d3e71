#include "server/table/table_bucket.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "durable.pb.h"

namespace hetps {

uint32_t TtlStamps(const TableOptions& o) {
  if (o.ttl_clocks > 0) return static_cast<uint32_t>(std::min<int64_t>(o.ttl_clocks, UINT32_MAX));
  if (o.ttl_seconds > 0)
    return static_cast<uint32_t>(std::clamp(std::ceil(o.ttl_seconds), 1.0, 4e9));
  return 0;
}

TableBucket::TableBucket(const TensorSpec& table, int64_t cap, const Optimizer& server_optimizer)
    : options_(table.table) {
  const Optimizer* optimizer = &server_optimizer;
  if (!options_.optimizer.empty()) {
    auto made = MakeOptimizer(options_.optimizer);
    if (!made.ok()) {
      error_ = Status::InvalidArgument(
          fmt::format("table '{}': optimizer: {}", table.name, made.status().message()));
      return;
    }
    own_optimizer_ = std::move(*made);
    optimizer = own_optimizer_.get();
  }
  auto eviction = MakeEviction(options_.eviction);
  if (!eviction.ok()) {
    error_ = Status::InvalidArgument(
        fmt::format("table '{}': eviction: {}", table.name, eviction.status().message()));
    return;
  }
  shard_ = std::make_unique<TableShard>(table.name, options_, cap, TtlStamps(options_), *optimizer,
                                        std::move(*eviction));
}

uint32_t TableBucket::Stamp(int64_t clock) const {
  if (options_.ttl_clocks > 0)
    return static_cast<uint32_t>(std::clamp<int64_t>(clock, 0, UINT32_MAX));
  return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

void TableBucket::Save(proto::TableCheckpoint& out) const {
  if (shard_) shard_->Save(out);
  out.set_swept(swept_);
  for (const auto& [clock, by_worker] : held_) {
    for (const auto& [worker, updates] : by_worker) {
      for (const Held& h : updates) {
        proto::TableCheckpoint::Held* held = out.add_held();
        held->set_clock(clock);
        held->set_worker(worker);
        held->set_update(static_cast<const char*>(h.update.data()), h.update.size());
        held->set_num_keys(h.n);
      }
    }
  }
}

Status TableBucket::Load(const proto::TableCheckpoint& in) {
  if (!shard_) return error_;
  if (Status s = shard_->Load(in); !s.ok()) return s;
  swept_ = in.swept();
  held_.clear();
  const size_t row = static_cast<size_t>(options_.dim) * sizeof(float) + sizeof(uint64_t);
  for (const proto::TableCheckpoint::Held& h : in.held()) {
    if (h.num_keys() < 0 || h.update().size() != static_cast<size_t>(h.num_keys()) * row) {
      return Status::Malformed(fmt::format("a held table update of {} bytes for {} keys",
                                           h.update().size(), h.num_keys()));
    }
    Hold(h.clock(), h.worker(), zmq::message_t(h.update().data(), h.update().size()), h.num_keys());
  }
  return Status();
}

void TableBucket::MaybeExpire(uint32_t now) {
  const uint32_t ttl = TtlStamps(options_);
  if (ttl == 0 || shard_ == nullptr || now < swept_ ||
      now - swept_ < std::max<uint32_t>(1, ttl / 2)) {
    return;
  }
  swept_ = now;
  shard_->Expire(now);
}

void TableBucket::Hold(int64_t clock, int32_t w, zmq::message_t update, int64_t n) {
  held_[clock][w].push_back(Held{std::move(update), n});
}

int64_t TableBucket::HeldBy(int32_t w) const {
  int64_t n = 0;
  for (const auto& [clock, by_worker] : held_) {
    if (auto it = by_worker.find(w); it != by_worker.end())
      n += static_cast<int64_t>(it->second.size());
  }
  return n;
}

void TableBucket::Step(const std::vector<const Held*>& updates, float scale, uint32_t now) {
  const int64_t dim = options_.dim;
  std::unordered_map<uint64_t, int64_t> slot;
  std::vector<uint64_t> keys;
  std::vector<float> sums;
  for (const Held* h : updates) {
    const auto* k = static_cast<const uint64_t*>(h->update.data());
    std::vector<float> rows(static_cast<size_t>(h->n * dim));  // aligned copy of the rows
    std::memcpy(rows.data(), k + h->n, rows.size() * sizeof(float));
    for (int64_t i = 0; i < h->n; ++i) {
      auto [it, fresh] = slot.try_emplace(k[i], static_cast<int64_t>(keys.size()));
      if (fresh) {
        keys.push_back(k[i]);
        sums.resize(sums.size() + dim, 0.0f);
      }
      float* sum = sums.data() + it->second * dim;
      for (int64_t j = 0; j < dim; ++j) sum[j] += rows[i * dim + j];
    }
  }
  if (keys.empty()) return;
  if (Status s =
          shard_->Push(keys.data(), static_cast<int64_t>(keys.size()), sums.data(), scale, now);
      !s.ok()) {
    // Its pushes were acknowledged when held; a full table without eviction loses the round's
    // new rows (the shard counted the refusal), as it would have refused them one by one.
    spdlog::warn("round of a held table update: {}", s.message());
  }
}

int TableBucket::ApplyRound(const RoundSpec& round, uint32_t now) {
  int steps = 0;
  std::vector<const Held*> step;
  int contributors = 0;
  auto close = [&] {
    if (step.empty()) return;
    const float scale = round.combine == RoundSpec::Combine::kSum || contributors == 0
                            ? 1.0f
                            : 1.0f / static_cast<float>(contributors);
    Step(step, scale, now);
    step.clear();
    contributors = 0;
    ++steps;
  };
  // Whether worker w's updates of `clock` are this round's (the same rule when applying them
  // and when dropping what was applied: the steps point into held_ until then).
  auto applies = [&](int64_t clock, int32_t w) {
    return !(round.only_clock && clock != round.clock) &&
           (round.workers.empty() ||
            std::find(round.workers.begin(), round.workers.end(), w) != round.workers.end());
  };
  for (auto& [clock, by_worker] : held_) {
    if (clock > round.clock) break;
    for (auto w = by_worker.begin(); w != by_worker.end();) {
      if (!applies(clock, w->first)) {
        w = round.only_clock && clock < round.keep_from ? by_worker.erase(w) : std::next(w);
        continue;
      }
      for (const Held& h : w->second) step.push_back(&h);
      ++contributors;
      ++w;
    }
    if (!round.one_step) close();
  }
  close();
  // What was applied goes; what waits stays.
  for (auto c = held_.begin(); c != held_.end() && c->first <= round.clock;) {
    for (auto w = c->second.begin(); w != c->second.end();) {
      w = applies(c->first, w->first) ? c->second.erase(w) : std::next(w);
    }
    c = c->second.empty() ? held_.erase(c) : std::next(c);
  }
  return steps;
}

}  // namespace hetps
