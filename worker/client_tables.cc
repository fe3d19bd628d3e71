// Client: sparse tables (include/hetps/client.h, docs/tables.md). A call's keys are made unique
// (a push sums repeated keys' rows), grouped by bucket, and each bucket's keys (and rows) go
// as one request in one frame, so a server gets one batched message per call.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "hetps/client.h"
#include "worker/client_impl.h"

namespace hetps {
namespace {

// The table's tensor id, checked.
StatusOr<int32_t> ResolveTable(const std::optional<ShardMap>& map, const std::string& table,
                               int64_t n, const void* keys, const void* rows) {
  if (!map) return Status::FailedPrecondition("DeclareTensors first");
  const int32_t id = map->TensorId(table);
  if (id < 0) return Status::NotFound(fmt::format("unknown table '{}'", table));
  if (!map->tensors()[id].is_table()) {
    return Status::InvalidArgument(fmt::format("'{}' is a dense tensor: use Push and Pull", table));
  }
  if (n < 0 || n > (int64_t{1} << 30)) {
    return Status::InvalidArgument(fmt::format("table '{}': {} keys in one call", table, n));
  }
  if (n > 0 && (keys == nullptr || rows == nullptr)) {
    return Status::InvalidArgument("null keys or rows");
  }
  return id;
}

// A call's keys, unique and grouped by bucket: `order` lists the unique keys bucket by bucket,
// `first[r]..first[r + 1]` those of request r (to partitions()[parts[r]]; a bucket's keys go in
// requests of at most max_keys), and `slot[i]` where key i of the call went.
struct Grouped {
  std::vector<int32_t> parts;
  std::vector<int64_t> first;
  std::vector<uint64_t> order;
  std::vector<int64_t> slot;
};

Grouped Group(const ShardMap& map, int32_t tensor, const uint64_t* keys, int64_t n,
              int64_t max_keys) {
  const std::vector<int32_t>& buckets = map.PartitionsOf(tensor);
  const int32_t count = static_cast<int32_t>(buckets.size());
  // Repeated keys found with an open-addressing set of the unique ones' indices (load <= 1/2).
  int shift = 64;
  while ((size_t{1} << (64 - shift)) < 2 * static_cast<size_t>(n) + 2) --shift;
  std::vector<int32_t> slots(size_t{1} << (64 - shift), -1);
  const size_t mask = slots.size() - 1;
  std::vector<uint64_t> keys_of;
  std::vector<int32_t> bucket_of;
  keys_of.reserve(static_cast<size_t>(n));
  bucket_of.reserve(static_cast<size_t>(n));
  std::vector<int64_t> index(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    size_t at = static_cast<size_t>((keys[i] * 0x9e3779b97f4a7c15ULL) >> shift);
    while (slots[at] >= 0 && keys_of[slots[at]] != keys[i]) at = (at + 1) & mask;
    if (slots[at] < 0) {
      slots[at] = static_cast<int32_t>(keys_of.size());
      keys_of.push_back(keys[i]);
      bucket_of.push_back(TableBucketOf(keys[i], count));
    }
    index[i] = slots[at];
  }
  // Counting sort of the unique keys by bucket.
  std::vector<int64_t> start(count + 1, 0);
  for (int32_t b : bucket_of) ++start[b + 1];
  for (int32_t b = 0; b < count; ++b) start[b + 1] += start[b];
  Grouped g;
  g.order.resize(keys_of.size());
  std::vector<int64_t> at(start.begin(), start.end() - 1), position(keys_of.size());
  for (size_t u = 0; u < keys_of.size(); ++u) {
    position[u] = at[bucket_of[u]]++;
    g.order[position[u]] = keys_of[u];
  }
  for (int32_t b = 0; b < count; ++b) {
    for (int64_t at = start[b]; at < start[b + 1]; at += max_keys) {  // chunks of max_keys
      g.parts.push_back(buckets[b]);
      g.first.push_back(at);
    }
  }
  g.first.push_back(static_cast<int64_t>(keys_of.size()));
  g.slot.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g.slot[i] = position[index[i]];
  return g;
}

// Keys of one request at most: its frame (keys and rows) stays within kRequestBytes, far below
// what a server reads in one message (--max_partition_bytes).
int64_t MaxKeysPerRequest(int64_t dim) {
  constexpr int64_t kRequestBytes = int64_t{8} << 20;
  return std::max<int64_t>(
      1, kRequestBytes / static_cast<int64_t>(sizeof(uint64_t) + dim * sizeof(float)));
}

}  // namespace

Status Client::DeclareTable(const std::string& name, const TableOptions& options, int32_t layer) {
  if (Status s = impl_->Open(); !s.ok()) return s;
  if (impl_->map) return Status::FailedPrecondition("declare tables before DeclareTensors");
  if (name.empty()) return Status::InvalidArgument("a table needs a name");
  if (Status s = options.Validate(name); !s.ok()) return s;
  std::lock_guard lock(impl_->tables_mu);
  for (const TensorSpec& t : impl_->tables) {
    if (t.name == name)
      return Status::InvalidArgument(fmt::format("table '{}' declared twice", name));
  }
  impl_->tables.emplace_back(name, std::vector<int64_t>{options.dim}, layer, options);
  return Status();
}

Status Client::CheckTables() {
  const ShardMap& map = *impl_->map;
  for (size_t t = 0; t < map.tensors().size(); ++t) {
    if (!map.tensors()[t].is_table()) continue;
    const uint64_t no_key = 0;
    float no_row = 0;
    if (Status s = PullRows(map.tensors()[t].name, &no_key, 0, &no_row).Wait(); !s.ok()) return s;
  }
  return Status();
}

Ticket Client::PushRows(const std::string& table, const uint64_t* keys, int64_t n,
                        const float* grads) {
  if (Status s = impl_->Open(); !s.ok()) return Ticket(FailedOp(s));
  auto id = ResolveTable(impl_->map, table, n, keys, grads);
  if (!id.ok()) return Ticket(FailedOp(id.status()));
  const ShardMap& map = *impl_->map;
  const int64_t dim = map.tensors()[*id].table.dim;
  const Grouped g = Group(map, *id, keys, n, MaxKeysPerRequest(dim));
  // Each bucket's frame: its keys, then their rows (repeated keys' rows summed).
  const int64_t unique = static_cast<int64_t>(g.order.size());
  std::vector<float> sums(static_cast<size_t>(unique * dim), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float* sum = sums.data() + g.slot[i] * dim;
    const float* row = grads + i * dim;
    for (int64_t j = 0; j < dim; ++j) sum[j] += row[j];
  }
  auto op = std::make_shared<Ticket::State>(static_cast<int>(g.parts.size()));
  std::vector<Outgoing> batch;
  batch.reserve(g.parts.size());
  const int64_t step = clock();
  int64_t sent = 0;
  for (size_t b = 0; b < g.parts.size(); ++b) {
    const int64_t first = g.first[b], count = g.first[b + 1] - first;
    const size_t key_bytes = static_cast<size_t>(count) * sizeof(uint64_t);
    const size_t row_bytes = static_cast<size_t>(count * dim) * sizeof(float);
    auto bytes = std::make_shared<std::vector<uint8_t>>(key_bytes + row_bytes);
    std::memcpy(bytes->data(), g.order.data() + first, key_bytes);
    std::memcpy(bytes->data() + key_bytes, sums.data() + first * dim, row_bytes);
    Outgoing& o = batch.emplace_back();
    impl_->UpdateRequest(o, proto::PUSH, g.parts[b], op, step, 1.0);
    o.header.set_num_keys(count);
    o.header.set_num_elements(count * dim);
    o.frames_only = true;
    sent += static_cast<int64_t>(bytes->size());
    std::shared_ptr<const std::vector<uint8_t>> frame = std::move(bytes);
    o.payload.push_back(SharedFrame(frame));
    o.encoded = std::move(frame);
  }
  impl_->report.OnPushed(sent, sent);
  if (batch.empty()) return Ticket();
  impl_->io.Submit(std::move(batch));
  return Ticket(op);
}

Ticket Client::PullRows(const std::string& table, const uint64_t* keys, int64_t n, float* out) {
  if (Status s = impl_->Open(); !s.ok()) return Ticket(FailedOp(s));
  auto id = ResolveTable(impl_->map, table, n, keys, out);
  if (!id.ok()) return Ticket(FailedOp(id.status()));
  const ShardMap& map = *impl_->map;
  const int64_t dim = map.tensors()[*id].table.dim;
  auto g = std::make_shared<Grouped>(Group(map, *id, keys, n, MaxKeysPerRequest(dim)));
  if (n == 0) {  // one bucket asked for nothing: the server checks that it holds the table
    g->parts.push_back(map.PartitionsOf(*id)[0]);
    g->first = {0, 0};
  }
  // The unique keys' rows land here, bucket by bucket, and are spread over `out` at the end.
  auto rows = std::make_shared<std::vector<float>>(std::max<size_t>(1, g->order.size() * dim));
  auto op = std::make_shared<Ticket::State>(static_cast<int>(g->parts.size()));
  op->then = [g, rows, out, dim, n] {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(out + i * dim, rows->data() + g->slot[i] * dim, dim * sizeof(float));
    }
  };
  std::vector<Outgoing> batch;
  batch.reserve(g->parts.size());
  const int64_t step = clock();
  for (size_t b = 0; b < g->parts.size(); ++b) {
    const int64_t first = g->first[b], count = g->first[b + 1] - first;
    auto bytes = std::make_shared<const std::vector<uint8_t>>(
        reinterpret_cast<const uint8_t*>(g->order.data() + first),
        reinterpret_cast<const uint8_t*>(g->order.data() + first + count));
    Outgoing& o = batch.emplace_back();
    o.target = map.partitions()[g->parts[b]].server_rank;
    o.op = op;
    o.header.set_type(proto::PULL);
    o.header.set_partition(g->parts[b]);
    o.header.set_clock(step);
    o.header.set_num_keys(count);
    o.header.set_codec(impl_->pulls.codec);
    o.dst = rows->data() + first * dim;
    o.dst_len = count * dim;
    o.frames_only = true;
    o.payload.push_back(SharedFrame(bytes));
    o.encoded = std::move(bytes);
  }
  impl_->io.Submit(std::move(batch));
  return Ticket(op);
}

}  // namespace hetps
