#include "server/replicator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "common/message.h"
#include "server/partition_store.h"

namespace hetps {
namespace {

constexpr char kShipEndpoint[] = "inproc://server-replicate";

}  // namespace

// One hand-over to the thread: a record or snapshot to ship, a new backup set, or (none of
// them) the stop signal.
struct Replicator::Item {
  enum Kind { kStop, kRecord, kSnapshot, kBackups } kind = kStop;
  int32_t pid = -1;
  std::string body;         // the record's or the snapshot's bytes
  zmq::message_t values;    // a record's floats (empty: none)
  std::vector<int32_t> to;  // kSnapshot: the backups it is for
  std::string identity;     // a worker's reply waits for the acknowledgements
  std::optional<proto::Header> reply;
  std::vector<zmq::message_t> payload;
  std::vector<proto::NodeInfo> backups;  // kBackups
  int64_t epoch = 0;
};

struct Replicator::Backup {
  proto::NodeInfo node;
  zmq::socket_t socket;
  std::unordered_set<int32_t> holds;  // partitions whose snapshot it was sent
};

struct Replicator::Pending {
  std::set<int32_t> waiting;  // backups that have not acknowledged
  std::string identity;
  proto::Header reply;
  std::vector<zmq::message_t> payload;
};

Replicator::Replicator(zmq::context_t& context, std::string replies, int32_t self, const Auth* auth)
    : context_(context),
      replies_endpoint_(std::move(replies)),
      self_(self),
      auth_(auth),
      in_(context, zmq::socket_type::push) {
  // Owners wait when this many shipments queue (each may hold a partition's floats).
  in_.set(zmq::sockopt::sndhwm, 64);
  in_.bind(kShipEndpoint);
  thread_ = std::thread([this] { Loop(); });
}

Replicator::~Replicator() {
  Enqueue(std::make_unique<Item>());
  thread_.join();
}

void Replicator::Enqueue(std::unique_ptr<Item> item) {
  Item* raw = item.release();  // the thread takes ownership
  std::lock_guard<std::mutex> lock(in_mu_);
  (void)in_.send(zmq::message_t(&raw, sizeof(raw)), zmq::send_flags::none);
}

std::vector<int32_t> Replicator::SetBackups(const std::vector<proto::NodeInfo>& backups,
                                            int64_t epoch) {
  std::vector<int32_t> fresh;
  std::set<int32_t> now;
  for (const proto::NodeInfo& b : backups) {
    now.insert(b.id());
    if (!known_.contains(b.id())) fresh.push_back(b.id());
  }
  known_ = now;
  auto item = std::make_unique<Item>();
  item->kind = Item::kBackups;
  item->backups = backups;
  item->epoch = epoch;
  active_.store(!backups.empty(), std::memory_order_release);
  Enqueue(std::move(item));
  return fresh;
}

void Replicator::Ship(int32_t pid, const proto::LogRecord& record, const float* values, int64_t n,
                      zmq::message_t* frame, const std::string& identity, proto::Header* reply,
                      std::vector<zmq::message_t>* payload) {
  auto item = std::make_unique<Item>();
  item->kind = Item::kRecord;
  item->pid = pid;
  record.SerializeToString(&item->body);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (frame != nullptr && frame->data() == values && frame->size() == bytes) {
    item->values.copy(*frame);  // shared, not copied
  } else if (n > 0) {
    item->values = zmq::message_t(values, bytes);
  }
  unsettled_.fetch_add(1, std::memory_order_acq_rel);
  if (reply != nullptr) {
    item->identity = identity;
    item->reply = std::move(*reply);
    if (payload != nullptr) item->payload = std::move(*payload);
  }
  Enqueue(std::move(item));
}

void Replicator::ShipSnapshot(const PartitionState& part, const std::vector<int32_t>& to) {
  auto item = std::make_unique<Item>();
  item->kind = Item::kSnapshot;
  item->pid = part.info().id;
  item->to = to;
  proto::PartitionCheckpoint checkpoint;
  part.Save(checkpoint);
  checkpoint.SerializeToString(&item->body);
  unsettled_.fetch_add(1, std::memory_order_acq_rel);
  Enqueue(std::move(item));
}

void Replicator::Loop() {
  zmq::socket_t in(context_, zmq::socket_type::pull);
  in.connect(kShipEndpoint);
  zmq::socket_t out(context_, zmq::socket_type::push);
  out.connect(replies_endpoint_);
  auto release = [&](Pending& p, const std::string& error) {
    if (p.identity.empty()) return;
    if (!error.empty()) {
      p.reply = ErrorReply(p.reply, Status::Unavailable(error), self_);
      p.payload.clear();
    }
    (void)out.send(zmq::buffer(p.identity), zmq::send_flags::sndmore);
    hetps::Send(out, p.reply, std::move(p.payload));
  };
  while (true) {
    std::vector<zmq::pollitem_t> items = {{in.handle(), 0, ZMQ_POLLIN, 0}};
    for (auto& b : backups_) items.push_back({b->socket.handle(), 0, ZMQ_POLLIN, 0});
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
    for (size_t i = 1; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      Backup& b = *backups_[i - 1];
      while (auto env = Receive(b.socket, zmq::recv_flags::dontwait, /*routed=*/false)) {
        OnAck(b, env->message.header);
      }
    }
    for (int k = 0; k < 256 && (items[0].revents & ZMQ_POLLIN); ++k) {
      zmq::message_t m;
      if (!in.recv(m, zmq::recv_flags::dontwait)) break;
      Item* raw = nullptr;
      std::memcpy(&raw, m.data(), sizeof(raw));
      std::unique_ptr<Item> item(raw);
      if (item->kind == Item::kStop) {
        for (auto& [seq, p] : pending_) release(*p, "the server is stopping");
        return;
      }
      if (item->kind == Item::kRecord && (backups_.empty() || fenced())) {
        Pending p;  // nobody to wait for (or nobody will answer): the reply goes now
        p.identity = std::move(item->identity);
        if (item->reply) p.reply = std::move(*item->reply);
        p.payload = std::move(item->payload);
        release(p, fenced() ? fenced_reason_ : std::string());
        unsettled_.fetch_sub(1, std::memory_order_acq_rel);
        continue;
      }
      Handle(std::move(item));
    }
    // Acknowledged or abandoned shipments release their replies.
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!it->second->waiting.empty() && !fenced()) {
        ++it;
        continue;
      }
      release(*it->second, fenced() ? fenced_reason_ : std::string());
      it = pending_.erase(it);
      unsettled_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

void Replicator::Handle(std::unique_ptr<Item> item) {
  if (item->kind == Item::kBackups) {
    epoch_ = item->epoch;
    std::set<int32_t> keep;
    for (const proto::NodeInfo& n : item->backups) keep.insert(n.id());
    for (size_t i = 0; i < backups_.size();) {
      if (keep.contains(backups_[i]->node.id())) {
        keep.erase(backups_[i]->node.id());
        ++i;
        continue;
      }
      Drop(backups_[i]->node.id());
    }
    for (const proto::NodeInfo& n : item->backups) {
      if (!keep.contains(n.id())) continue;
      auto b = std::make_unique<Backup>();
      b->node = n;
      b->socket = zmq::socket_t(context_, zmq::socket_type::dealer);
      b->socket.set(zmq::sockopt::linger, 0);
      b->socket.set(zmq::sockopt::routing_id, NodeIdentity(self_));  // the backup checks it
      if (auth_ != nullptr) {
        if (Status s = auth_->SecureClient(b->socket, n.public_key()); !s.ok()) {
          spdlog::error("cannot replicate to backup node {}: {}", n.id(), s.message());
          continue;  // never waited for; its primary is the scheduler's to replace
        }
      }
      b->socket.connect(n.address());
      spdlog::info("replicating to backup node {} at {} (epoch {})", n.id(), n.address(), epoch_);
      backups_.push_back(std::move(b));
    }
    return;
  }
  Send(*item);
}

// Sends a record (to the backups that hold its partition) or a snapshot (to those it is for).
void Replicator::Send(Item& item) {
  const uint64_t seq = next_seq_++;
  auto p = std::make_unique<Pending>();
  proto::Header h;
  h.set_type(proto::REPLICATE);
  h.set_sender(self_);
  h.set_partition(item.pid);
  h.mutable_replica()->set_epoch(epoch_);
  h.mutable_replica()->set_seq(seq);
  h.mutable_replica()->set_snapshot(item.kind == Item::kSnapshot);
  for (auto& b : backups_) {
    const bool to = item.kind == Item::kSnapshot
                        ? std::find(item.to.begin(), item.to.end(), b->node.id()) != item.to.end()
                        : b->holds.contains(item.pid);
    if (!to) continue;
    if (item.kind == Item::kSnapshot) b->holds.insert(item.pid);
    std::vector<zmq::message_t> frames;
    frames.emplace_back(item.body.data(), item.body.size());
    if (item.values.size() > 0) frames.emplace_back().copy(item.values);  // shared
    hetps::Send(b->socket, h, std::move(frames));
    p->waiting.insert(b->node.id());
    shipped_bytes_.fetch_add(static_cast<int64_t>(item.body.size() + item.values.size()),
                             std::memory_order_relaxed);
  }
  shipped_.fetch_add(1, std::memory_order_relaxed);
  p->identity = std::move(item.identity);
  if (item.reply) p->reply = std::move(*item.reply);
  p->payload = std::move(item.payload);
  pending_.emplace(seq, std::move(p));  // released by the loop once nobody is waiting
}

void Replicator::OnAck(Backup& backup, const proto::Header& h) {
  if (h.type() == proto::ERROR) {
    return Fence(
        fmt::format("backup node {} refused a record: {}", backup.node.id(), h.error_message()));
  }
  if (h.type() != proto::REPLICATE_ACK) return;
  auto it = pending_.find(h.replica().seq());
  if (it != pending_.end()) it->second->waiting.erase(backup.node.id());
}

void Replicator::Drop(int32_t backup) {
  for (auto& [seq, p] : pending_) p->waiting.erase(backup);
  std::erase_if(backups_, [&](const auto& b) {
    if (b->node.id() != backup) return false;
    spdlog::info("no longer replicating to node {}", backup);
    return true;
  });
}

void Replicator::Fence(const std::string& why) {
  if (fenced()) return;
  fenced_reason_ = "fenced: " + why + "; a newer primary serves this rank";
  fenced_.store(true, std::memory_order_release);
  spdlog::error("{}", fenced_reason_);
}

}  // namespace hetps
