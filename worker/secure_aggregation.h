// SecureUpload: a client's side of one secure-aggregation round (SecAgg+; the protocol and
// its phases are in scheduler/secure_round.h, the arithmetic in common/secagg/masks.h). Setup
// advertises this client's fresh keys and shares its secrets with its neighbours (phases 0 and
// 1, right after selection, before training); Mask turns an update into the words it pushes;
// Unmask answers the scheduler's request once the round closed (phase 3). Every exchange with
// the scheduler goes through `exchange` (the client's SECAGG requests).
//
// What the client checks: every share sealed to it opens with its sender's key and names the
// sender, this client and this round (else it does not upload: a dropout, which the round
// survives); it reveals at most one of a neighbour's two secrets in a round, only for
// neighbours in U2, and only when at least t clients (itself included) are said to be kept.
//
// Thread-safety: none; one per client.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/secagg/crypto.h"
#include "common/secagg/masks.h"
#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

class SecureUpload {
 public:
  using Exchange = std::function<StatusOr<proto::SecAgg>(const proto::SecAgg&)>;
  SecureUpload(int32_t self, Exchange exchange);

  // Phases 0 and 1 of the round the scheduler's task names (`task`: its ROUND_TASK part), for
  // an upload of weight `weight`.
  Status Setup(const proto::SecAgg& task, double weight);
  bool ready() const { return ready_; }
  int64_t round() const { return round_; }
  // words[i] = the masked fixed-point word of x[i], coordinate offset + i of tensor `tensor`.
  // REQUIRES: ready().
  void Mask(int32_t tensor, int64_t offset, const float* x, int64_t n, uint32_t* words) const;
  // Adaptive clipping under distributed DP: `value` (the client's noised centred bit) as its
  // masked word of kCountTensor in fixed point `fp` (secagg::CountFixedPoint). REQUIRES: ready().
  uint32_t MaskCount(double value, const secagg::FixedPoint& fp) const;
  // Phase 3: reveals what `request` (the ROUND_UPLOADED answer's part) asks for, or refuses;
  // `kept`: whether the round kept this client's upload (then its own share of its self-mask
  // seed goes too).
  Status Unmask(const proto::SecAgg& request, bool kept);
  // Forgets the round (its secrets included).
  void Reset();

  // What secure aggregation cost this client so far: bytes of its SECAGG requests and their
  // answers, and seconds of its thread's CPU time in Setup, Mask and Unmask.
  int64_t bytes() const { return bytes_; }
  double cpu_s() const { return cpu_s_; }

 private:
  struct Neighbour {
    proto::SecAggKeys keys;
    std::string self_share, key_share;  // its secrets' shares sealed to this client
    bool shared = false;                // in U2: its masks count
    secagg::Seed pair_seed{};
  };
  StatusOr<proto::SecAgg> Send(const proto::SecAgg& request);
  Status Advertise(double weight);
  Status ShareSecrets();
  Status TakeShares(const proto::SecAgg& answer);

  int32_t self_;
  Exchange exchange_;
  bool ready_ = false;
  int64_t round_ = -1;
  secagg::FixedPoint fp_;
  int threshold_ = 0;
  double weight_ = 1;
  secagg::KeyPair cipher_, mask_;
  secagg::Seed self_seed_{};
  std::map<int32_t, Neighbour> neighbours_;
  std::string own_self_share_;        // its share of its own self-mask seed
  std::map<int32_t, bool> revealed_;  // owner -> revealed its self-mask share (else its key's)
  int64_t bytes_ = 0;
  mutable double cpu_s_ = 0;  // Mask counts its time too
};

}  // namespace hetps
