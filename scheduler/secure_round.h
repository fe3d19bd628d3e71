// SecureRound: the scheduler's side of one secure-aggregation round (SecAgg+, ALGORITHMS.md §11;
// docs/secure-aggregation.md), as pure logic: what each request may carry, when a phase is
// complete, what each client is answered, and what the servers are told to remove. FedRounds
// holds the requests and sends the answers (fed_rounds_secure.cc); the clients' side is
// worker/secure_aggregation.h, the servers' PartitionState::ApplySecure.
//
// The round's selected clients
//   0. ADVERTISE two X25519 public keys (cipher, mask), the weight their upload will carry and a
//      hash of their self-mask seed b; once every live selected client did (U1), each is answered
//      its neighbours' keys in a k-regular graph over U1 (common/secagg/graph.h), the threshold
//      t and the fixed point (bits from the weights' sum);
//   1. SHARE one sealed box per neighbour holding t-of-(k+1) Shamir shares of b and of their mask
//      secret key (the last share their own); once every live member of U1 did (U2), each is
//      answered those sealed to it;
//   2. push their update masked with b and the pairwise masks of their neighbours in U2, and
//      report it (ROUND_UPLOADED; U3: the uploads the round keeps);
//   3. UNMASK: each member of U2 still there (asked with its ROUND_UPLOADED answer, kept or, in
//      an over-committed round, late) reveals, for each neighbour in U2, its share of b if that
//      one is in U3, else of its mask key, and a kept one its own share of its b; once t shares
//      of each are in, the scheduler rebuilds every b of U3
//      (checked against its hash) and every mask key of U2 \ U3 (checked against its public
//      key), and tells the servers the masks the kept uploads' sum still carries.
// The servers thus see only masked uploads and, after removing what they are told, the sum of
// U3's. A request that does not fit its phase is refused with the reason.
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/registry.h"
#include "common/secagg/graph.h"
#include "common/status.h"
#include "hetps.pb.h"

namespace hetps {

struct SecureOptions {
  bool on = false;
  double clip = 8;       // coordinates are clipped to [-clip, clip] before encoding
  double dropout = 0.3;  // share of a round's clients that may drop after masking (sizes k)
  int neighbours = 0;    // k; 0: chosen from the round's size and `dropout`
  std::string ToString() const;
};

// --secure_aggregation: "off" or "secagg+[:clip=C,dropout=D,neighbours=K]".
const SpecRegistry& SecureAggregationModes();
StatusOr<SecureOptions> ParseSecureAggregation(const std::string& text);

class SecureRound {
 public:
  enum class Phase { kAdvertise, kShare, kMasking, kUnmask, kDone };
  // `keep`: the uploads the round keeps (K), which ROUND_TASK tells the clients.
  SecureRound(int64_t round, const std::vector<int32_t>& selected, const SecureOptions& options,
              uint64_t seed, int keep);

  Phase phase() const { return phase_; }
  int64_t round() const { return round_; }
  // What ROUND_TASK tells a selected client: the round is secure, its clip.
  proto::SecAgg Task() const;

  // Requests of client `id`; an error says why the request is refused (nothing is recorded).
  Status Advertise(int32_t id, const proto::SecAgg& request);
  Status Share(int32_t id, const proto::SecAgg& request);
  Status Reveal(int32_t id, const proto::SecAgg& request);

  // Whether every client in `live` that the phase waits for has sent its request. Unmasking is
  // complete once every secret has its t shares, or, with `every_holder` (virtual time, where
  // which holders come first must not depend on the host), once every live holder revealed.
  bool Complete(const std::set<int32_t>& live, bool every_holder = false) const;
  // Ends advertising (U1: who advertised) and sharing (U2: who shared); an error when the round
  // cannot go on securely (fewer than two clients, weights too large for the fixed point).
  Status CloseAdvertise();
  Status CloseShare();
  proto::SecAgg AdvertiseAnswer(int32_t id) const;
  proto::SecAgg ShareAnswer(int32_t id) const;
  // Whether client `id` is in U2 (its upload can count).
  bool Masking(int32_t id) const { return shared_.contains(id); }

  // Starts unmasking with the uploads the round keeps (of clients in U2): an error when fewer
  // than two are kept (the sum of one is that client's update).
  Status BeginUnmask(const std::vector<int32_t>& kept);
  // What member `id` of U2 is asked to reveal: every holder that is still there reveals, kept or
  // not (an over-committed round keeps K of its clients, fewer than a majority of the holders of
  // a secret; the others, reporting late, reveal all the same).
  proto::SecAgg UnmaskRequest(int32_t id) const;
  // Whether every secret the close needs has its t shares.
  bool Enough() const;
  // Rebuilds the secrets from the revealed shares: what the servers remove from the kept
  // uploads' sum, or why it cannot be done (a secret with fewer than t shares, a share that
  // rebuilds something else than was committed to).
  StatusOr<proto::SecureClose> Finish();

  const std::vector<int32_t>& kept() const { return kept_; }
  int threshold() const { return params_.threshold; }
  int neighbours() const { return params_.neighbours; }
  int bits() const { return bits_; }

 private:
  Status CheckClient(int32_t id, Phase phase, const char* step) const;
  // The secret of `owner` (self mask or mask key) from the shares revealed to this round.
  StatusOr<std::string> Rebuild(int32_t owner, bool self_mask) const;

  int64_t round_;
  int keep_;
  SecureOptions options_;
  uint64_t seed_;
  Phase phase_ = Phase::kAdvertise;
  std::set<int32_t> selected_;
  std::map<int32_t, proto::SecAggKeys> keys_;                 // U1 (and before: who advertised)
  std::map<int32_t, std::vector<int32_t>> neighbours_;        // over U1
  std::map<int32_t, std::vector<proto::SecAggShare>> inbox_;  // sealed shares, by recipient
  std::set<int32_t> shared_;                                  // U2 (and before: who shared)
  std::vector<int32_t> kept_;                                 // U3
  std::set<int32_t> revealed_;                                // members of U3 that answered
  // Revealed shares: (owner, self_mask) -> revealer -> share.
  std::map<std::pair<int32_t, bool>, std::map<int32_t, std::string>> reveals_;
  secagg::GraphParams params_;
  int bits_ = 0;
};

}  // namespace hetps
