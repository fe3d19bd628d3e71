// ServerLoop: the data dir, restore, checkpoints and cuts (server_loop.h).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/server_loop.h"

namespace hetps {

// A data dir remembers its rank: the restarted server asks the scheduler for it again.
Status ServerLoop::OpenDataDir() {
  if (!options_.restore_from.empty()) {
    auto manifest = ReadManifest(options_.restore_from);
    if (!manifest.ok()) return manifest.status();
    restore_ = std::move(*manifest);
    spdlog::info("starting from checkpoint {} (clock {})", options_.restore_from,
                 restore_->clock());
  }
  if (options_.data_dir.empty()) return Status();
  auto store = DurableStore::Open(options_.data_dir, *ParseDurability(options_.durability));
  if (!store.ok()) return store.status();
  durable_ = std::move(*store);
  if (durable_->meta() && restore_) {
    return Status::FailedPrecondition(fmt::format(
        "data dir {} already holds a model; starting from checkpoint {} needs an empty one",
        durable_->dir(), options_.restore_from));
  }
  if (durable_->meta()) link_->registration().set_rank(durable_->meta()->server_rank());
  spdlog::info("data dir {} ({}), durability {}, checkpoints every {} ms", durable_->dir(),
               durable_->meta() ? fmt::format("server rank {}", durable_->meta()->server_rank())
                                : std::string("new"),
               DurabilityName(durable_->durability()), options_.checkpoint_interval_ms);
  return Status();
}

namespace {

// Whether two shard maps cut the same tensors into the same partitions, wherever they place
// them (live re-sharding moves partitions between a data dir's claim and a restart).
bool SameModel(const proto::ShardMap& a, const proto::ShardMap& b) {
  auto layout = [](proto::ShardMap m) {
    m.clear_epoch();
    m.clear_moves();
    for (proto::PartitionInfo& p : *m.mutable_partitions()) p.clear_server_rank();
    return m;
  };
  return SameMessage(layout(a), layout(b));
}

}  // namespace

// Brings every partition back from the data dir, or claims a new one for this cluster.
Status ServerLoop::RestoreShards() {
  if (!durable_) return Status();
  const std::string& dir = durable_->dir();
  if (!durable_->meta()) {
    proto::DurableMeta meta;
    meta.set_server_rank(link_->rank());
    *meta.mutable_shard_map() = ToProto(*map_);
    return durable_->SetMeta(meta);
  }
  const proto::DurableMeta& meta = *durable_->meta();
  if (meta.server_rank() != link_->rank()) {
    return Status::FailedPrecondition(
        fmt::format("data dir {} belongs to server rank {}, but this server joined as rank {}", dir,
                    meta.server_rank(), link_->rank()));
  }
  if (!SameModel(meta.shard_map(), ToProto(*map_))) {
    return Status::FailedPrecondition(fmt::format(
        "data dir {} holds another model ({} tensors, {} partitions; the cluster declared {} "
        "and {}); start this server on an empty data dir, or declare the same tensors",
        dir, meta.shard_map().tensors_size(), meta.shard_map().partitions_size(),
        map_->tensors().size(), map_->partitions().size()));
  }
  return RecoverOwned();
}

// Each owner's partitions are restored on a thread of their own (as they are served: one
// thread per partition, owners side by side), while this thread keeps the scheduler hearing
// from the server (a large model takes seconds, or it would be declared dead) and tells the
// operator how far it got.
Status ServerLoop::RecoverOwned() {
  const std::string& dir = durable_->dir();
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;
  std::atomic<int64_t> replayed{0}, done{0};
  std::atomic<int> running{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  Status error;
  std::vector<std::thread> threads;
  for (const auto& owned : state_.owned) {
    if (owned.empty()) continue;
    ++running;
    threads.emplace_back([&, owned = &owned] {
      for (int32_t id : *owned) {
        if (failed.load()) break;
        auto n = RecoverPartition(state_, *state_.store->Find(id));
        if (!n.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (error.ok()) error = n.status();
          failed.store(true);
          break;
        }
        replayed += *n;
        ++done;
      }
      --running;
    });
  }
  while (running.load() > 0) {
    link_->MaybeHeartbeat();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::chrono::steady_clock::now() - last_progress > std::chrono::seconds(5)) {
      last_progress = std::chrono::steady_clock::now();
      spdlog::info("restoring from {}: {} of {} partitions", dir, done.load(),
                   state_.store->num_partitions());
    }
  }
  for (std::thread& t : threads) t.join();
  if (!error.ok()) return error;
  spdlog::info("restored {} partitions from {}: {} logged updates replayed in {:.2f} s",
               state_.store->num_partitions(), dir, replayed.load(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status();
}

void ServerLoop::MaybeCheckpoint() {
  if (!durable_ || !map_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_checkpoint_ < std::chrono::milliseconds(options_.checkpoint_interval_ms)) return;
  CheckpointOwned(state_, 0);
  last_checkpoint_ = now;
}

// Loads this rank's part of the checkpoint into the partitions (a data dir, new by then, takes
// each as its first checkpoint). Per-worker state moves from the old run's node ids to the
// new ones by rank.
Status ServerLoop::RestoreCut() {
  const std::string& dir = options_.restore_from;
  const auto start = std::chrono::steady_clock::now();
  auto reader = CutReader::Open(dir, link_->rank());
  if (!reader.ok()) return reader.status();
  const proto::CutFileMeta& meta = (*reader)->meta();
  if (meta.clock() != restore_->clock() || !SameMessage(meta.shard_map(), ToProto(*map_))) {
    return Status::FailedPrecondition(fmt::format(
        "checkpoint {} holds another model ({} tensors, {} partitions at clock {}; the cluster "
        "declared {} and {})",
        dir, meta.shard_map().tensors_size(), meta.shard_map().partitions_size(), meta.clock(),
        map_->tensors().size(), map_->partitions().size()));
  }
  std::map<int32_t, int32_t> by_rank, ids;  // new: rank -> id; old id -> new id
  for (const proto::NodeInfo& w : link_->view().workers()) by_rank[w.rank()] = w.id();
  for (const proto::NodeInfo& w : meta.workers()) {
    if (auto it = by_rank.find(w.rank()); it != by_rank.end()) ids[w.id()] = it->second;
  }
  int64_t restored = 0;
  for (const auto& owned : state_.owned) {
    for (int32_t id : owned) {
      auto saved = (*reader)->Read(id);
      if (!saved.ok()) return saved.status();
      RemapWorkers(*saved, ids);
      PartitionState& part = *state_.store->Find(id);
      if (Status s = part.Load(*saved); !s.ok()) {
        return Status(s.code(), fmt::format("checkpoint {}: {}", dir, s.message()));
      }
      if (durable_) {
        if (Status s = durable_->Checkpoint(id, part); !s.ok()) return s;
      }
      ++restored;
      link_->MaybeHeartbeat();
    }
  }
  spdlog::info("restored {} partitions from checkpoint {} (clock {}) in {:.2f} s", restored, dir,
               meta.clock(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status();
}

void ServerLoop::OnCheckpoint(const proto::Header& h) {
  const proto::Cut& cut = h.cut();
  if (cut.abort()) {
    if (cut_ && cut_->request_id == h.request_id() && !cut_->job) {
      spdlog::info("checkpoint at clock {} called off", cut.clock());
      std::deque<Envelope> deferred = std::move(cut_->deferred);
      cut_.reset();
      ReleaseDeferred(std::move(deferred));
    }
    return;
  }
  auto refuse = [&](Status s) {
    proto::Header r = ErrorReply(h, s, link_->id());
    r.mutable_cut()->set_clock(cut.clock());
    r.mutable_cut()->set_seen_clock(max_clock_seen_);
    link_->Send(r);
  };
  if (!map_) return refuse(Status::Unavailable("no shard map installed yet"));
  if (cut_ && cut_->job) {
    return refuse(Status::Unavailable(
        fmt::format("still writing the checkpoint at clock {}", cut_->cut.clock())));
  }
  if (max_clock_seen_ >= cut.clock()) {
    return refuse(Status::Aborted(
        fmt::format("clock {} was served already (up to {}); a checkpoint needs a later clock",
                    cut.clock(), max_clock_seen_)));
  }
  std::deque<Envelope> earlier;  // a repeated request replaces the one pending
  if (cut_) earlier = std::move(cut_->deferred);
  cut_.emplace();
  cut_->request_id = h.request_id();
  cut_->cut = cut;
  ReleaseDeferred(std::move(earlier));
  ProgressCut();
}

void ServerLoop::ProgressCut() {
  if (!cut_) return;
  const int64_t clock = cut_->cut.clock();
  if (!cut_->job) {
    // With no live worker left the cluster is shutting down (the scheduler calls the cut
    // off): its clock will never be reached.
    const int64_t slowest = gate_->slowest_clock();
    if (slowest < clock || slowest == kUnbounded) return;
    // Every live worker finished clock - 1 and nothing later was served: each owner writes its
    // partitions after everything handed over before (FIFO), rounds of clock - 1 included.
    std::error_code ec;
    std::filesystem::create_directories(cut_->cut.dir(), ec);
    proto::CutFileMeta meta;
    meta.set_format(kCutFileFormat);
    meta.set_server_rank(link_->rank());
    meta.set_clock(clock);
    *meta.mutable_shard_map() = ToProto(*map_);
    for (const proto::NodeInfo& w : link_->view().workers()) *meta.add_workers() = w;
    cut_->writing_since = std::chrono::steady_clock::now();
    cut_->job = std::make_shared<CutJob>(cut_->cut.dir(), std::move(meta), 1 + options_.threads);
    apply_threads_->WriteCut(cut_->job);
    cut_->job->Write(*state_.store, 0, state_.owned[0]);
    // The apply threads write before anything handed over from now on, and this thread's
    // partitions are written: what waited may go on.
    ReleaseDeferred(std::exchange(cut_->deferred, {}));
  }
  if (!cut_->job->done()) return;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_->writing_since).count();
  proto::Header req;
  req.set_type(proto::CHECKPOINT);
  req.set_request_id(cut_->request_id);
  const Status s = cut_->job->status();
  proto::Header r =
      s.ok() ? ReplyTo(req, proto::CHECKPOINT_DONE, link_->id()) : ErrorReply(req, s, link_->id());
  *r.mutable_cut() = cut_->cut;
  r.mutable_cut()->set_bytes(cut_->job->bytes());
  r.mutable_cut()->set_seconds(secs);
  link_->Send(r);
  if (s.ok()) {
    spdlog::info("checkpoint at clock {}: {} partitions, {:.1f} MiB written to {} in {:.2f} s",
                 clock, state_.store->num_partitions(), cut_->job->bytes() / 1048576.0,
                 cut_->cut.dir(), secs);
  } else {
    spdlog::error("checkpoint at clock {} failed: {}", clock, s.ToString());
  }
  cut_.reset();
}

// Hands requests held back for a checkpoint to the usual path, in their order (some may wait
// again, for a later checkpoint).
void ServerLoop::ReleaseDeferred(std::deque<Envelope> deferred) {
  for (Envelope& env : deferred) HandleWorker(env);
}

}  // namespace hetps
