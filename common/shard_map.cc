#include "common/shard_map.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/mix.h"

namespace hetps {
namespace {

Status Validate(const std::vector<TensorSpec>& tensors, int num_servers, int64_t partition_bytes) {
  if (num_servers <= 0) return Status::InvalidArgument("shard map needs at least one server");
  if (partition_bytes < static_cast<int64_t>(sizeof(float))) {
    return Status::InvalidArgument(fmt::format("partition_bytes {} < 4", partition_bytes));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    if (t.name.empty()) return Status::InvalidArgument("tensor with an empty name");
    if (i > 0 && tensors[i - 1].name == t.name) {
      return Status::InvalidArgument(fmt::format("tensor '{}' declared twice", t.name));
    }
    if (t.shape.empty())
      return Status::InvalidArgument(fmt::format("tensor '{}' has no shape", t.name));
    if (t.is_table()) {
      if (Status s = t.table.Validate(t.name); !s.ok()) return s;
      if (t.shape != std::vector<int64_t>{t.table.dim}) {
        return Status::InvalidArgument(
            fmt::format("table '{}' must have the shape [dim] = [{}], not [{}]", t.name,
                        t.table.dim, fmt::join(t.shape, ",")));
      }
    } else if (t.table != TableOptions{}) {
      return Status::InvalidArgument(
          fmt::format("tensor '{}' has table options but no dim", t.name));
    }
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d <= 0 || n > std::numeric_limits<int64_t>::max() / 4 / d) {
        return Status::InvalidArgument(
            fmt::format("tensor '{}' has a bad shape [{}]", t.name, fmt::join(t.shape, ",")));
      }
      n *= d;
    }
  }
  return Status();
}

}  // namespace

Status TableOptions::Validate(const std::string& table) const {
  constexpr int64_t kMaxDim = 1 << 16;
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format("table '{}': {}", table, what));
  };
  if (dim <= 0 || dim > kMaxDim) return bad(fmt::format("dim {} is not in [1, {}]", dim, kMaxDim));
  if (max_rows < 0 || max_rows >= (int64_t{1} << 32) - 1) {
    return bad(fmt::format("max_rows {} is not in [0, 2^32 - 2]", max_rows));
  }
  if (min_count < 0) return bad(fmt::format("min_count {} < 0", min_count));
  if (!(ttl_seconds >= 0) || ttl_clocks < 0) return bad("a ttl is negative");
  if (ttl_seconds > 0 && ttl_clocks > 0) return bad("give ttl in seconds or in clocks, not both");
  if (init != "zeros" && init != "uniform" && init != "normal") {
    return bad(fmt::format("init '{}' is not zeros, uniform or normal", init));
  }
  if (!(init_scale >= 0) || !std::isfinite(init_scale)) {
    return bad(fmt::format("init_scale {} is not a finite number >= 0", init_scale));
  }
  if (eviction.empty()) return bad("no eviction policy (\"none\" refuses new rows when full)");
  return Status();
}

int32_t TableBucketOf(uint64_t key, int32_t buckets) {
  const uint64_t z = SplitMix64(key);  // every key bit reaches every output bit
  return static_cast<int32_t>(
      (static_cast<unsigned __int128>(z) * static_cast<uint64_t>(buckets)) >> 64);
}

int64_t TensorSpec::NumElements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

StatusOr<ShardMap> ShardMap::Build(std::vector<TensorSpec> tensors, int num_servers,
                                   int64_t partition_bytes) {
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  if (Status s = Validate(tensors, num_servers, partition_bytes); !s.ok()) return s;

  ShardMap map;
  map.tensors_ = std::move(tensors);
  map.num_servers_ = num_servers;
  map.base_servers_ = num_servers;
  map.partition_bytes_ = partition_bytes;
  const int64_t max_elems = partition_bytes / static_cast<int64_t>(sizeof(float));
  for (size_t t = 0; t < map.tensors_.size(); ++t) {
    if (map.tensors_[t].is_table()) {
      map.AddTableBuckets(static_cast<int32_t>(t));
      continue;
    }
    const int64_t n = map.tensors_[t].NumElements();
    const int64_t parts = (n + max_elems - 1) / max_elems;
    int64_t offset = 0;
    for (int64_t i = 0; i < parts; ++i) {
      Partition p;
      p.id = static_cast<int32_t>(map.partitions_.size());
      p.tensor_id = static_cast<int32_t>(t);
      p.index = static_cast<int32_t>(i);
      p.offset = offset;
      p.length = n / parts + (i < n % parts ? 1 : 0);
      offset += p.length;
      map.partitions_.push_back(p);
    }
  }

  // Largest first onto the least-loaded server (LPT): deterministic, and the spread between
  // servers never exceeds one partition.
  std::vector<int32_t> order(map.partitions_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return map.partitions_[a].length > map.partitions_[b].length;
  });
  std::vector<int64_t> load(num_servers, 0);
  for (int32_t id : order) {
    if (map.tensors_[map.partitions_[id].tensor_id].is_table()) continue;  // placed by bucket
    int best = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    map.partitions_[id].server_rank = best;
    load[best] += map.partitions_[id].length;
  }
  map.Index();
  return map;
}

void ShardMap::AddTableBuckets(int32_t tensor_id) {
  const int32_t buckets = kTableBucketsPerServer * num_servers_;
  for (int32_t b = 0; b < buckets; ++b) {
    Partition p;
    p.id = static_cast<int32_t>(partitions_.size());
    p.tensor_id = tensor_id;
    p.index = b;
    p.offset = b;
    p.length = 0;
    p.server_rank = b % num_servers_;
    partitions_.push_back(p);
  }
}

void ShardMap::Index() {
  by_tensor_.assign(tensors_.size(), {});
  tensor_ids_.clear();
  for (size_t t = 0; t < tensors_.size(); ++t)
    tensor_ids_[tensors_[t].name] = static_cast<int32_t>(t);
  for (const Partition& p : partitions_) by_tensor_[p.tensor_id].push_back(p.id);
}

int32_t ShardMap::TensorId(const std::string& name) const {
  auto it = tensor_ids_.find(name);
  return it == tensor_ids_.end() ? -1 : it->second;
}

std::vector<int64_t> ShardMap::ServerBytes() const {
  std::vector<int64_t> bytes(num_servers_, 0);
  for (const Partition& p : partitions_) {
    bytes[p.server_rank] += p.length * static_cast<int64_t>(sizeof(float));
  }
  return bytes;
}

StatusOr<ShardMap> ShardMap::WithMoves(const std::map<int32_t, int32_t>& moves,
                                       int64_t epoch) const {
  ShardMap next = *this;
  for (const auto& [id, rank] : moves) {
    if (id < 0 || static_cast<size_t>(id) >= partitions_.size()) {
      return Status::InvalidArgument(
          fmt::format("no partition {} (the map has {})", id, partitions_.size()));
    }
    Partition& p = next.partitions_[id];
    if (tensors_[p.tensor_id].is_table()) {
      return Status::InvalidArgument(
          fmt::format("partition {} is a bucket of table '{}': only dense partitions move", id,
                      tensors_[p.tensor_id].name));
    }
    if (!serving(rank)) {
      return Status::InvalidArgument(
          fmt::format("partition {} cannot go to rank {} (ranks 0..{}{})", id, rank,
                      num_servers_ - 1, retired_.empty() ? "" : ", some retired"));
    }
    p.server_rank = rank;
    next.moves_[id] = rank;
  }
  // A partition moved back to its rules' rank is no longer listed.
  auto rules = Build(tensors_, base_servers_, partition_bytes_);
  for (auto it = next.moves_.begin(); it != next.moves_.end();) {
    it = rules->partitions_[it->first].server_rank == it->second ? next.moves_.erase(it)
                                                                 : std::next(it);
  }
  next.epoch_ = epoch < 0 ? epoch_ + 1 : epoch;
  return next;
}

StatusOr<ShardMap> ShardMap::WithRanks(int num_servers, const std::set<int32_t>& retired) const {
  if (num_servers < num_servers_) {
    return Status::InvalidArgument(
        fmt::format("a map of {} ranks cannot shrink to {}", num_servers_, num_servers));
  }
  std::vector<int64_t> held(num_servers, 0);
  for (const Partition& p : partitions_) ++held[p.server_rank];
  for (int32_t r : retired) {
    if (r < 0 || r >= num_servers) {
      return Status::InvalidArgument(fmt::format("no rank {} to retire", r));
    }
    if (held[r] > 0) {
      return Status::FailedPrecondition(
          fmt::format("rank {} still holds {} partition(s)", r, held[r]));
    }
  }
  if (static_cast<int>(retired.size()) >= num_servers) {
    return Status::FailedPrecondition("every rank would be retired");
  }
  ShardMap next = *this;
  next.num_servers_ = num_servers;
  next.retired_ = retired;
  next.epoch_ = epoch_ + 1;
  return next;
}

proto::TensorSpec ToProto(const TensorSpec& spec) {
  proto::TensorSpec p;
  p.set_name(spec.name);
  for (int64_t d : spec.shape) p.add_shape(d);
  p.set_layer(spec.layer);
  p.set_dtype(proto::FLOAT32);
  if (spec.is_table()) {
    const TableOptions& t = spec.table;
    proto::TableSpec* out = p.mutable_table();
    out->set_dim(t.dim);
    out->set_max_rows(t.max_rows);
    out->set_eviction(t.eviction);
    out->set_min_count(t.min_count);
    out->set_ttl_seconds(t.ttl_seconds);
    out->set_ttl_clocks(t.ttl_clocks);
    out->set_init(t.init);
    out->set_init_scale(t.init_scale);
    out->set_seed(t.seed);
    out->set_optimizer(t.optimizer);
  }
  return p;
}

TensorSpec FromProto(const proto::TensorSpec& spec) {
  TensorSpec t{spec.name(), {spec.shape().begin(), spec.shape().end()}, spec.layer()};
  if (spec.has_table()) {
    const proto::TableSpec& in = spec.table();
    t.table = TableOptions{.dim = in.dim(),
                           .max_rows = in.max_rows(),
                           .eviction = in.eviction(),
                           .min_count = in.min_count(),
                           .ttl_seconds = in.ttl_seconds(),
                           .ttl_clocks = in.ttl_clocks(),
                           .init = in.init(),
                           .init_scale = in.init_scale(),
                           .seed = in.seed(),
                           .optimizer = in.optimizer()};
  }
  return t;
}

proto::ShardMap ToProto(const ShardMap& map) {
  proto::ShardMap p;
  for (const TensorSpec& t : map.tensors()) *p.add_tensors() = ToProto(t);
  for (const Partition& part : map.partitions()) {
    proto::PartitionInfo* info = p.add_partitions();
    info->set_tensor_id(part.tensor_id);
    info->set_index(part.index);
    info->set_offset(part.offset);
    info->set_length(part.length);
    info->set_server_rank(part.server_rank);
  }
  p.set_partition_bytes(map.partition_bytes());
  p.set_num_servers(map.num_servers());
  p.set_epoch(map.epoch());
  if (map.base_servers() != map.num_servers()) p.set_base_servers(map.base_servers());
  for (int32_t r : map.retired()) p.add_retired(r);
  for (const auto& [id, rank] : map.moves()) {
    proto::PartitionMove* m = p.add_moves();
    m->set_partition(id);
    m->set_rank(rank);
  }
  return p;
}

StatusOr<ShardMap> ShardMapFromProto(const proto::ShardMap& p) {
  std::vector<TensorSpec> tensors;
  for (const proto::TensorSpec& t : p.tensors()) {
    if (t.dtype() != proto::FLOAT32) {
      return Status::DtypeMismatch(fmt::format("tensor '{}' is not float32", t.name()));
    }
    tensors.push_back(FromProto(t));
  }
  const int base = p.base_servers() > 0 ? p.base_servers() : p.num_servers();
  if (base > p.num_servers()) {
    return Status::Malformed(
        fmt::format("shard map of {} ranks built over {}", p.num_servers(), base));
  }
  auto built = ShardMap::Build(std::move(tensors), base, p.partition_bytes());
  if (!built.ok()) return built;
  if (base != p.num_servers() || p.retired_size() > 0) {
    const std::set<int32_t> retired(p.retired().begin(), p.retired().end());
    if (retired.size() != static_cast<size_t>(p.retired_size())) {
      return Status::Malformed("shard map retires a rank twice");
    }
    // Moves come next: the retired ranks are checked against the final placement below.
    built->num_servers_ = p.num_servers();
    built->retired_ = retired;
    for (int32_t r : retired) {
      if (r < 0 || r >= p.num_servers()) {
        return Status::Malformed(
            fmt::format("shard map retires rank {} of {}", r, p.num_servers()));
      }
    }
  }
  std::map<int32_t, int32_t> moves;
  for (const proto::PartitionMove& m : p.moves()) {
    if (!moves.emplace(m.partition(), m.rank()).second) {
      return Status::Malformed(fmt::format("shard map moves partition {} twice", m.partition()));
    }
  }
  if (p.epoch() < 0 || (p.epoch() == 0 && !moves.empty())) {
    return Status::Malformed(
        fmt::format("shard map epoch {} with {} moves", p.epoch(), moves.size()));
  }
  auto map = built->WithMoves(moves, p.epoch());
  if (!map.ok()) return Status::Malformed(fmt::format("shard map: {}", map.status().message()));
  if (map->moves().size() != moves.size()) {
    return Status::Malformed("shard map lists a move to a partition's own rules' rank");
  }
  for (const Partition& part : map->partitions()) {
    if (map->retired().contains(part.server_rank)) {
      return Status::Malformed(fmt::format("shard map places partition {} on retired rank {}",
                                           part.id, part.server_rank));
    }
  }
  if (map->partitions().size() != static_cast<size_t>(p.partitions_size())) {
    return Status::Malformed("shard map partition count differs from its tensors");
  }
  for (int i = 0; i < p.partitions_size(); ++i) {
    const Partition& a = map->partitions()[i];
    const proto::PartitionInfo& b = p.partitions(i);
    if (a.tensor_id != b.tensor_id() || a.offset != b.offset() || a.length != b.length() ||
        a.server_rank != b.server_rank()) {
      return Status::Malformed(fmt::format("shard map partition {} differs from its rules", i));
    }
  }
  return map;
}

}  // namespace hetps
