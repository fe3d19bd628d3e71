// Batches: several messages to one peer as one multipart message. A step of a model with many
// small tensors sends one request per partition; each message costs the same hand-offs between
// threads and the same system calls whatever its size, so at a few KB per request those, not
// the bytes, bound the rate. A BATCH header carries the parts' headers in order and how many
// payload frames each has; the parts' frames follow it unchanged (zero-copy, as sent alone).
// The receiver splits it back into the messages it carries and handles each as if it had come
// alone, so everything after the socket (checks, gates, deduplication) is the same.
//
// Thread-safety: none; a Batch belongs to the thread that fills and sends it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/message.h"
#include "common/status.h"

namespace hetps {

// The most parts one batch may carry; a longer one is malformed.
constexpr int kMaxBatchParts = 1024;

// Collects messages to one peer, in order, up to a payload budget. The parts' headers go
// straight into the BATCH header, whose storage is kept from one batch to the next: a part costs
// one header move in and none out.
class Batch {
 public:
  // `max_bytes`: the payload bytes (and `max_parts` the messages) a batch may reach.
  explicit Batch(int64_t max_bytes, int max_parts = kMaxBatchParts)
      : max_bytes_(max_bytes), max_parts_(max_parts) {
    header_.set_type(proto::BATCH);
  }

  // Whether a message of `payload_bytes` may join without passing the budget (an empty batch
  // takes anything).
  bool Fits(int64_t payload_bytes) const {
    return empty() || (parts() < max_parts_ && bytes_ + payload_bytes <= max_bytes_);
  }
  void Add(proto::Header&& header, std::vector<zmq::message_t>&& payload);
  bool empty() const { return header_.batch_size() == 0; }
  int parts() const { return header_.batch_size(); }

  // Hands the message to `send(const proto::Header&, std::vector<zmq::message_t>)` and empties
  // the batch: a lone part goes as itself, several as one BATCH from `sender`. Nothing when
  // empty.
  template <typename SendFn>
  void Flush(int32_t sender, SendFn&& send) {
    if (empty()) return;
    if (parts() == 1) {
      send(header_.batch(0), std::move(payload_));
    } else {
      header_.set_sender(sender);
      send(header_, std::move(payload_));
    }
    Clear();
  }
  // Empties the batch, dropping its frames.
  void Clear();

 private:
  const int64_t max_bytes_;
  const int max_parts_;
  proto::Header header_;
  std::vector<zmq::message_t> payload_;
  int64_t bytes_ = 0;
};

// Whether `env` is a well-formed header of type BATCH (its parts still to be checked).
inline bool IsBatch(const Envelope& env) {
  return env.status.ok() && env.message.header.type() == proto::BATCH;
}

// Splits a BATCH into the messages it carries, in order, each with the envelope's identity and
// peer, appended to `out`; the envelope's payload frames move into them. A malformed batch
// (frame counts that do not match the frames, a part of unknown type or itself a batch, more
// than kMaxBatchParts parts) appends nothing and says why.
// REQUIRES: IsBatch(env).
Status Unbatch(Envelope& env, std::vector<Envelope>& out);

}  // namespace hetps
