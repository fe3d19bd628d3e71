// SharedReads: which of the servers' answers to pulls an aggregator may give a worker's pull
// instead of asking again (docs/aggregation-tier.md, "Pulls"). A pull of partition p at clock c
// may be answered with the reply to any pull of p, in the same codec, that
//  - was for a clock >= c: the consistency controllers' read rules depend only on the reader's
//    clock and are monotone in it (the servers say so in Policy.shared_reads), so an answer
//    they gave at clock c' is one they would give at c <= c'; and
//  - was sent to the server after the last sum holding this worker's push of p was
//    acknowledged: the server handles an aggregator's requests in order, so that reply shows
//    the worker its own writes, as a direct pull would.
// Such a pull is joined while it is on its way, or its reply answered from the last one kept.
//
// Thread-safety: none; the aggregator's loop.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "hetps.pb.h"

namespace hetps {

class SharedReads {
 public:
  struct Reply {
    proto::Header header;
    zmq::message_t frame;
  };

  // Worker w's push of partition p was acknowledged by the server as part of the request
  // numbered `id` (numbers grow in the order requests leave for the servers).
  void Acked(int32_t w, int32_t p, uint64_t id);
  // The pull on its way that may answer worker w's pull of p at `clock` in `codec`, if any.
  std::optional<uint64_t> InFlight(int32_t w, int32_t p, int64_t clock,
                                   const std::string& codec) const;
  // The kept reply that may answer it, if any (valid until the next Answered of p).
  Reply* Kept(int32_t w, int32_t p, int64_t clock, const std::string& codec);
  // A pull of p at `clock` in `codec` left as request `id`; it was answered (kept if it is the
  // newest of p), or failed.
  void Sent(int32_t p, uint64_t id, int64_t clock, const std::string& codec);
  Reply& Answered(int32_t p, uint64_t id, Reply reply);
  void Failed(int32_t p, uint64_t id);

 private:
  struct Read {
    uint64_t id = 0;
    int64_t clock = 0;
    std::string codec;
  };
  bool Serves(const Read& r, int32_t w, int32_t p, int64_t clock, const std::string& codec) const;

  std::map<std::pair<int32_t, int32_t>, uint64_t> acked_;  // (worker, partition) -> request
  std::map<int32_t, std::vector<Read>> in_flight_;         // by partition
  std::map<int32_t, std::pair<Read, Reply>> kept_;         // by partition
  Reply scratch_;  // an answer older than the kept one, for Answered to return
};

}  // namespace hetps
