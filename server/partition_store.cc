#include "server/partition_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "common/secagg/masks.h"
#include "durable.pb.h"
#include "server/table/table_bucket.h"

namespace hetps {

PartitionState::PartitionState(const Partition& partition, int num_slots)
    : info_(partition), values_(std::make_shared<std::vector<float>>(partition.length)) {
  for (int s = 0; s < num_slots; ++s) slots_.emplace_back(partition.length, 0.0f);
  for (auto& slot : slots_) slot_ptrs_.push_back(slot.data());
}

PartitionState::~PartitionState() = default;

void PartitionState::set_table(std::unique_ptr<TableBucket> table) { table_ = std::move(table); }

int64_t PartitionState::state_bytes() const {
  if (table_ && table_->shard()) return table_->shard()->bytes();
  return info_.length * static_cast<int64_t>(sizeof(float));
}

float* PartitionState::mutable_values() {
  // Only the owning thread creates references, and others only drop them, so a count of 1
  // means no snapshot is out and none can appear meanwhile. use_count() is a relaxed load; a
  // reader on another thread (ZeroMQ's I/O thread sending a pull reply) drops its reference
  // with a release decrement after its last read of the values. The acquire fence makes those
  // reads happen before the writes that follow, on any architecture, not only x86.
  if (values_.use_count() > 1) {
    values_ = std::make_shared<std::vector<float>>(*values_);
  } else {
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return values_->data();
}

void PartitionState::ApplyGradient(const Optimizer& optimizer, const float* g, float scale) {
  ++version_;
  optimizer.Apply(mutable_values(), g, info_.length, slot_ptrs_.data(), version_, scale);
}

void PartitionState::SetValues(const float* values) {
  ++version_;
  std::copy(values, values + info_.length, mutable_values());
}

bool PartitionState::InitializeFrom(const float* values) {
  if (initialized_) return false;
  std::copy(values, values + info_.length, mutable_values());
  initialized_ = true;
  return true;
}

void PartitionState::Hold(int64_t clock, int32_t w, zmq::message_t update, double weight,
                          int64_t base_version) {
  held_[clock][w].push_back(Held{std::move(update), weight, base_version});
}

int64_t PartitionState::HeldBy(int32_t w) const {
  int64_t n = 0;
  for (const auto& [clock, by_worker] : held_) {
    if (auto it = by_worker.find(w); it != by_worker.end()) {
      n += static_cast<int64_t>(it->second.size());
    }
  }
  return n;
}

namespace {

// Worker w's upload of `clock` when `round` takes it late, else null.
const RoundSpec::Late* FindLate(const RoundSpec& round, int64_t clock, int32_t w) {
  if (clock == round.clock) return nullptr;
  for (const RoundSpec::Late& l : round.late) {
    if (l.clock == clock && l.worker == w) return &l;
  }
  return nullptr;
}

// Whether an upload of `clock` that `round` does not use stays held: without only_clock it
// waits for a later round; with it, only from keep_from on (it may still be taken late).
bool Waits(const RoundSpec& round, int64_t clock) {
  return !round.only_clock || clock >= round.keep_from;
}

// Where worker w's upload of `clock` comes in `round`'s order: the round's workers as the
// scheduler listed them, then its late uploads; anything else after them.
size_t Position(const RoundSpec& round, int64_t clock, int32_t w) {
  auto named = std::find(round.workers.begin(), round.workers.end(), w);
  if (named != round.workers.end() && clock == round.clock) return named - round.workers.begin();
  for (size_t i = 0; i < round.late.size(); ++i) {
    if (round.late[i].clock == clock && round.late[i].worker == w) return round.workers.size() + i;
  }
  return std::numeric_limits<size_t>::max();
}

// The held uploads of one clock that `round` takes, in the round's order (Position), so that
// their sum does not depend on the node ids the workers were given; the others of that clock
// are dropped, or left waiting (Waits). The caller erases each one it takes.
template <typename ByWorker>
std::vector<typename ByWorker::iterator> Taken(const RoundSpec& round, int64_t clock,
                                               ByWorker& by_worker) {
  const bool dropped_clock = round.only_clock && clock != round.clock;
  std::vector<typename ByWorker::iterator> taken;
  for (auto w = by_worker.begin(); w != by_worker.end();) {
    const bool counts =
        round.workers.empty() ||
        std::find(round.workers.begin(), round.workers.end(), w->first) != round.workers.end();
    if (FindLate(round, clock, w->first) == nullptr && (dropped_clock || !counts)) {
      w = Waits(round, clock) ? std::next(w) : by_worker.erase(w);
      continue;
    }
    taken.push_back(w++);
  }
  std::stable_sort(taken.begin(), taken.end(), [&](const auto& a, const auto& b) {
    return Position(round, clock, a->first) < Position(round, clock, b->first);
  });
  return taken;
}

}  // namespace

// A round-based aggregator (temporal) takes each clock's updates itself.
// The round's uploads go to the aggregator clock by clock: those of the workers it counts (all
// when it names none); with only_clock, the others of that clock and every earlier clock are
// dropped (from keep_from on they wait), otherwise they wait for a later round. Late uploads
// of earlier clocks go with the round's own clock, weighted by their factor.
int PartitionState::HandOverRound(const RoundSpec& round) {
  round_noise_std_ = round.noise_std;
  int rounds = 0;
  bool late_open = false;  // late uploads handed over, waiting for the round's EndRound
  for (auto c = held_.begin(); c != held_.end() && c->first <= round.clock;) {
    bool handed = false;
    for (auto w : Taken(round, c->first, c->second)) {
      const RoundSpec::Late* late = FindLate(round, c->first, w->first);
      for (const Held& h : w->second) {
        PushInfo info;
        info.worker = w->first;
        info.clock = c->first;
        info.base_version = h.base_version;
        info.weight = h.weight * (late != nullptr ? late->factor : 1.0);
        aggregator_->Upload(*this, info, static_cast<const float*>(h.update.data()));
      }
      (late != nullptr ? late_open : handed) = true;
      c->second.erase(w);
    }
    if (handed) {
      aggregator_->EndRound(*this, c->first);
      late_open = false;
      ++rounds;
    }
    c = c->second.empty() ? held_.erase(c) : std::next(c);
  }
  if (late_open) {  // the round's own clock had nothing held
    aggregator_->EndRound(*this, round.clock);
    ++rounds;
  }
  return rounds;
}

// A committed upload (RoundSpec::per_push): its updates reach the aggregator as on arrival,
// with the version they were computed from, so staleness counts what was applied meanwhile.
int PartitionState::ApplyCommitted(const RoundSpec& round) {
  auto c = held_.find(round.clock);
  if (c == held_.end()) return 0;
  int applied = 0;
  for (const auto& [worker, updates] : c->second) {
    if (std::find(round.workers.begin(), round.workers.end(), worker) == round.workers.end()) {
      continue;  // not committed: dropped with the clock
    }
    for (const Held& h : updates) {
      PushInfo info;
      info.worker = worker;
      info.clock = c->first;
      info.base_version = h.base_version;
      info.weight = h.weight;
      aggregator_->OnPush(*this, info, static_cast<const float*>(h.update.data()));
      ++applied;
    }
  }
  held_.erase(c);
  return applied;
}

int PartitionState::ApplyRound(const Optimizer& optimizer, const RoundSpec& round) {
  if (table_) {
    const int steps = table_->ApplyRound(round, table_->Stamp(round.clock));
    version_ += steps;
    return steps;
  }
  if (round.secure) return ApplySecure(optimizer, round);
  if (round.per_push) return ApplyCommitted(round);
  if (aggregator_ && aggregator_->rounds()) return HandOverRound(round);
  int steps = 0;
  double total = 0;  // sum of weights (kWeighted) or contributors (kMean) of the open step
  bool open = false;
  auto step = [&] {
    if (!open) return;
    float scale = 1.0f;
    if (round.combine != RoundSpec::Combine::kSum && total > 0)
      scale = static_cast<float>(1 / total);
    ApplyGradient(optimizer, sum_.data(), scale);
    ++steps;
    open = false;
  };
  const int64_t version = version_;  // staleness is measured against the round's start
  for (auto c = held_.begin(); c != held_.end() && c->first <= round.clock;) {
    for (auto w : Taken(round, c->first, c->second)) {
      const RoundSpec::Late* late = FindLate(round, c->first, w->first);
      if (!open) {
        sum_.assign(info_.length, 0.0f);
        total = 0;
        open = true;
      }
      for (const Held& h : w->second) {
        double k = late != nullptr ? late->factor : 1.0;
        if (round.combine == RoundSpec::Combine::kWeighted) {
          const double sigma = static_cast<double>(std::max<int64_t>(0, version - h.base_version));
          k *= h.weight * std::pow(1.0 + sigma, -round.staleness_exponent);
          total += k;
        }
        const float kf = static_cast<float>(k);
        const float* g = static_cast<const float*>(h.update.data());
        for (int64_t i = 0; i < info_.length; ++i) sum_[i] += kf * g[i];
      }
      if (round.combine == RoundSpec::Combine::kMean) total += 1;
      c->second.erase(w);
    }
    if (!round.one_step) step();
    c = c->second.empty() ? held_.erase(c) : std::next(c);
  }
  step();
  return steps;
}

Status CheckSecureClose(const proto::SecureClose& secure) {
  if (!(secure.clip() > 0) || !std::isfinite(secure.clip()) || secure.bits() < 1 ||
      secure.bits() > 30) {
    return Status::Malformed(fmt::format("a secure round's fixed point (clip {:g}, {} bits)",
                                         secure.clip(), secure.bits()));
  }
  for (const proto::MaskSeed& m : secure.masks()) {
    if (m.seed().size() != secagg::kSeedBytes || (m.sign() != 1 && m.sign() != -1)) {
      return Status::Malformed("a secure round's mask seed is malformed");
    }
  }
  return Status();
}

int PartitionState::ApplySecure(const Optimizer& optimizer, const RoundSpec& round) {
  std::vector<uint32_t> words(info_.length, 0);
  double total = 0, staleness = 0;
  size_t found = 0;
  if (auto c = held_.find(round.clock); c != held_.end()) {
    for (int32_t w : round.workers) {
      auto it = c->second.find(w);
      if (it == c->second.end() || it->second.size() != 1) continue;
      const Held& h = it->second.front();
      const auto* y = static_cast<const uint32_t*>(h.update.data());
      for (int64_t i = 0; i < info_.length; ++i) words[i] += y[i];
      total += h.weight;
      staleness += PolynomialStaleness(version_ - h.base_version, round.staleness_exponent);
      ++found;
    }
  }
  // A cohort of buffered asynchrony (per_push: committed) leaves the other cohorts' clocks
  // held; a synchronous round drops every earlier one.
  if (round.per_push) {
    held_.erase(round.clock);
  } else {
    held_.erase(held_.begin(), held_.upper_bound(round.clock));
  }
  if (round.workers.empty() || !(total > 0)) return 0;
  if (found != round.workers.size()) {
    spdlog::error(
        "partition {}: secure round {} keeps {} uploads, {} of them here: its masks cannot be "
        "removed, nothing is applied",
        info_.id, round.clock, round.workers.size(), found);
    return 0;
  }
  for (const proto::MaskSeed& m : round.secure->masks()) {
    secagg::Seed seed;
    std::memcpy(seed.data(), m.seed().data(), seed.size());
    secagg::AddMask(seed, round.clock, info_.tensor_id, info_.offset, info_.length, -m.sign(),
                    words.data());
  }
  sum_.resize(info_.length);
  secagg::Decode(words.data(), info_.length,
                 secagg::FixedPoint{round.secure->clip(), round.secure->bits()}, sum_.data());
  // FedBuff's staleness weight, one for the cohort (the masked words cannot be weighted one by
  // one): the mean of its uploads' (1 + staleness)^-a, 1 when a = 0 (synchronous rounds).
  const double weight = staleness / static_cast<double>(found);
  ApplyGradient(optimizer, sum_.data(), static_cast<float>(weight / total));
  return 1;
}

bool PartitionState::Applied(uint64_t incarnation, int64_t seq) const {
  if (seq <= 0) return false;
  auto it = applied_.find(incarnation);
  return it != applied_.end() && seq <= it->second;
}

void PartitionState::MarkApplied(uint64_t incarnation, int64_t seq) {
  if (seq <= 0) return;
  int64_t& highest = applied_[incarnation];
  highest = std::max(highest, seq);
}

namespace {

// Copies exactly n floats from `bytes`, or says why not.
Status CopyFloats(const std::string& bytes, int64_t n, float* out, const char* what) {
  if (bytes.size() != static_cast<size_t>(n) * sizeof(float)) {
    return Status::Malformed(
        fmt::format("{}: {} bytes where {} floats belong", what, bytes.size(), n));
  }
  if (n > 0) std::memcpy(out, bytes.data(), bytes.size());
  return Status();
}

}  // namespace

void PartitionState::Save(proto::PartitionCheckpoint& out) const {
  SaveMeta(out);
  out.set_values(FloatBytes(values_->data(), info_.length));
  for (const auto& slot : slots_) out.add_slots(FloatBytes(slot.data(), info_.length));
}

std::vector<const float*> PartitionState::Arrays() const {
  std::vector<const float*> arrays = {values_->data()};
  for (const auto& slot : slots_) arrays.push_back(slot.data());
  return arrays;
}

std::vector<float*> PartitionState::MutableArrays() {
  std::vector<float*> arrays = {mutable_values()};
  for (auto& slot : slots_) arrays.push_back(slot.data());
  return arrays;
}

void PartitionState::SaveMeta(proto::PartitionCheckpoint& out) const {
  out.set_version(version_);
  out.set_initialized(initialized_);
  for (const auto& [incarnation, seq] : applied_) {
    auto* a = out.add_applied();
    a->set_incarnation(incarnation);
    a->set_seq(seq);
  }
  for (const auto& [clock, workers] : held_) {
    for (const auto& [worker, updates] : workers) {
      for (const Held& h : updates) {
        auto* held = out.add_held();
        held->set_clock(clock);
        held->set_worker(worker);
        held->set_update(static_cast<const char*>(h.update.data()), h.update.size());
        held->set_weight(h.weight);
        held->set_base_version(h.base_version);
      }
    }
  }
  if (aggregator_) aggregator_->Save(*out.mutable_aggregator());
  if (table_) table_->Save(*out.mutable_table());
}

Status PartitionState::Load(const proto::PartitionCheckpoint& in) {
  const std::string where = fmt::format("partition {}", info_.id);
  if (in.slots_size() != static_cast<int>(slots_.size())) {
    return Status::Malformed(fmt::format("{}: {} optimizer slots saved, the optimizer keeps {}",
                                         where, in.slots_size(), slots_.size()));
  }
  if (Status s = CopyFloats(in.values(), info_.length, mutable_values(), where.c_str()); !s.ok()) {
    return s;
  }
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (Status s = CopyFloats(in.slots(k), info_.length, slots_[k].data(), where.c_str());
        !s.ok()) {
      return s;
    }
  }
  return LoadMeta(in);
}

Status PartitionState::LoadMeta(const proto::PartitionCheckpoint& in) {
  const std::string where = fmt::format("partition {}", info_.id);
  version_ = in.version();
  initialized_ = in.initialized();
  applied_.clear();
  for (const auto& a : in.applied()) applied_[a.incarnation()] = a.seq();
  held_.clear();
  for (const auto& h : in.held()) {
    if (h.update().size() != static_cast<size_t>(info_.length) * sizeof(float)) {
      return Status::Malformed(
          fmt::format("{}: a held update of {} bytes", where, h.update().size()));
    }
    Hold(h.clock(), h.worker(), zmq::message_t(h.update().data(), h.update().size()), h.weight(),
         h.base_version());
  }
  if (table_) {
    if (Status s = table_->Load(in.table()); !s.ok()) {
      return Status(s.code(), fmt::format("{}: {}", where, s.message()));
    }
  }
  if (aggregator_) {
    if (Status s = aggregator_->Load(in.aggregator()); !s.ok()) {
      return Status(s.code(), fmt::format("{}: aggregator state: {}", where, s.message()));
    }
  }
  return Status();
}

namespace {

// A table bucket's share of its table's max_rows on this server: the server's cap spread over
// its buckets of the table (keys spread evenly over buckets), the remainder to the first ones.
int64_t BucketCap(const ShardMap& map, const Partition& p, int server_rank) {
  const int64_t max_rows = map.tensors()[p.tensor_id].table.max_rows;
  if (max_rows == 0) return 0;
  int64_t here = 0, before = 0;
  for (int32_t id : map.PartitionsOf(p.tensor_id)) {
    if (map.partitions()[id].server_rank != server_rank) continue;
    if (id < p.id) ++before;
    ++here;
  }
  return std::max<int64_t>(1, max_rows / here + (before < max_rows % here ? 1 : 0));
}

}  // namespace

PartitionStore::PartitionStore(const ShardMap& map, int server_rank, const Optimizer& optimizer,
                               const Initializer& initializer, const AlgorithmSpec* aggregation)
    : optimizer_(optimizer),
      aggregation_(aggregation ? *aggregation : *Aggregators().Parse("sum")),
      size_(map.partitions().size()),
      by_id_(map.partitions().size()),
      ptrs_(new std::atomic<PartitionState*>[map.partitions().size()]) {
  for (size_t i = 0; i < size_; ++i) ptrs_[i].store(nullptr, std::memory_order_relaxed);
  std::vector<const Partition*> local;
  int64_t floats = 0;
  for (const Partition& p : map.partitions()) {
    if (p.server_rank != server_rank) continue;
    local.push_back(&p);
    floats += p.length * (1 + optimizer.num_slots());
  }
  // Allocating (the pages fault in as they are zeroed) and filling GiBs takes seconds on one
  // core, before a restarted server can restore anything: large stores are built by a few
  // threads side by side (each partition by one; the initializer is a function of the
  // tensor and the offset).
  std::vector<std::unique_ptr<PartitionState>> built(local.size());
  auto build = [&](size_t first, size_t step) {
    for (size_t i = first; i < local.size(); i += step) {
      const Partition& p = *local[i];
      built[i] = std::make_unique<PartitionState>(p, optimizer.num_slots());
      if (!initializer.from_worker()) {
        initializer.Fill(map.tensors()[p.tensor_id].name, p.offset, built[i]->mutable_values(),
                         p.length);
        built[i]->MarkInitialized();
      }
    }
  };
  constexpr int64_t kParallelFloats = int64_t{16} << 20;  // 64 MiB
  const size_t threads =
      floats < kParallelFloats ? 1 : std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 4);
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(build, t, threads);
  build(0, threads);
  for (std::thread& h : helpers) h.join();
  for (size_t i = 0; i < local.size(); ++i) {
    const Partition& p = *local[i];
    const TensorSpec& tensor = map.tensors()[p.tensor_id];
    if (tensor.is_table()) {
      built[i]->set_table(
          std::make_unique<TableBucket>(tensor, BucketCap(map, p, server_rank), optimizer));
      built[i]->MarkInitialized();
    }
    built[i]->set_aggregator(
        Aggregators().EntryFor(aggregation_.name()).make(aggregation_, optimizer));
    by_id_[p.id] = std::move(built[i]);
    Publish(by_id_[p.id].get());
  }
}

std::unique_ptr<PartitionState> PartitionStore::New(const Partition& p) const {
  auto part = std::make_unique<PartitionState>(p, optimizer_.num_slots());
  part->set_aggregator(Aggregators().EntryFor(aggregation_.name()).make(aggregation_, optimizer_));
  return part;
}

StatusOr<PartitionState*> PartitionStore::Make(const Partition& p) {
  if (p.id < 0 || static_cast<size_t>(p.id) >= size_) {
    return Status::NotFound(fmt::format("no partition {}", p.id));
  }
  if (by_id_[p.id]) {
    return Status::FailedPrecondition(fmt::format("partition {} is held here already", p.id));
  }
  by_id_[p.id] = New(p);
  return by_id_[p.id].get();
}

void PartitionStore::Publish(PartitionState* part) {
  bytes_ += part->info().length * static_cast<int64_t>(sizeof(float));
  ++count_;
  ptrs_[part->info().id].store(part, std::memory_order_release);
}

std::unique_ptr<PartitionState> PartitionStore::Release(int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= size_ || !by_id_[id]) return nullptr;
  if (ptrs_[id].exchange(nullptr, std::memory_order_acq_rel) != nullptr) {
    bytes_ -= by_id_[id]->info().length * static_cast<int64_t>(sizeof(float));
    --count_;
  }
  return std::move(by_id_[id]);
}

}  // namespace hetps
