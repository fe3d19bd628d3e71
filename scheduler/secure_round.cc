#include "scheduler/secure_round.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/secagg/crypto.h"
#include "common/secagg/masks.h"

namespace hetps {
namespace {

// The most a sealed share pair may take: two 32-byte shares, the ids and round, the box's
// nonce and tag, with room to spare.
constexpr size_t kMaxSealedBytes = 512;

bool Contains(const std::vector<int32_t>& sorted, int32_t v) {
  return std::binary_search(sorted.begin(), sorted.end(), v);
}

}  // namespace

const SpecRegistry& SecureAggregationModes() {
  static const SpecRegistry* r = [] {
    struct Modes : SpecRegistry {
      Modes() : SpecRegistry("secure_aggregation") {
        AddInfo({"off", "the servers see each client's upload", {}});
        AddInfo({"secagg+",
                 "pairwise masks over a k-regular graph with t-of-k shared secrets (Bell et al. "
                 "CCS'20): the servers learn only the sum of a round's kept uploads",
                 {ParamDef::Real("clip", "8", 0, 1e6,
                                 "coordinates are clipped to [-clip, clip] before encoding", true),
                  ParamDef::Real("dropout", "0.3", 0, 0.9,
                                 "share of a round's clients that may drop after masking: sizes "
                                 "the graph (k) so that every secret keeps t shares"),
                  ParamDef::Int("neighbours", "0", 0, secagg::kMaxNeighbours,
                                "k (0: chosen from the round's size and dropout)")}});
      }
    };
    return new Modes();
  }();
  return *r;
}

StatusOr<SecureOptions> ParseSecureAggregation(const std::string& text) {
  auto spec = SecureAggregationModes().Parse(text.empty() ? "off" : text);
  if (!spec.ok()) return spec.status();
  SecureOptions o;
  if (spec->name() == "off") return o;
  o.on = true;
  o.clip = spec->Number("clip");
  o.dropout = spec->Number("dropout");
  o.neighbours = static_cast<int>(spec->Int("neighbours"));
  return o;
}

std::string SecureOptions::ToString() const {
  if (!on) return "off";
  return fmt::format("secagg+:clip={:g},dropout={:g},neighbours={}", clip, dropout, neighbours);
}

SecureRound::SecureRound(int64_t round, const std::vector<int32_t>& selected,
                         const SecureOptions& options, uint64_t seed, int keep)
    : round_(round),
      keep_(keep),
      options_(options),
      seed_(seed),
      selected_(selected.begin(), selected.end()) {}

proto::SecAgg SecureRound::Task() const {
  proto::SecAgg t;
  t.set_phase(proto::SecAgg::NONE);
  t.set_round(round_);
  t.set_clip(options_.clip);
  t.set_kept(keep_);
  return t;
}

Status SecureRound::CheckClient(int32_t id, Phase phase, const char* step) const {
  if (phase_ != phase) {
    return Status::FailedPrecondition(
        fmt::format("secure round {}: {} from client {} comes out of its phase", round_, step, id));
  }
  return Status();
}

Status SecureRound::Advertise(int32_t id, const proto::SecAgg& request) {
  if (Status s = CheckClient(id, Phase::kAdvertise, "keys"); !s.ok()) return s;
  if (!selected_.contains(id)) {
    return Status::PermissionDenied(
        fmt::format("secure round {}: client {} was not selected for it", round_, id));
  }
  if (keys_.contains(id)) {
    return Status::FailedPrecondition(
        fmt::format("secure round {}: client {} advertised its keys already", round_, id));
  }
  if (request.keys_size() != 1 || request.keys(0).worker() != id) {
    return Status::Malformed(
        fmt::format("secure round {}: client {} must advertise exactly its own keys", round_, id));
  }
  const proto::SecAggKeys& k = request.keys(0);
  if (k.cipher_pk().size() != secagg::kKeyBytes || k.mask_pk().size() != secagg::kKeyBytes ||
      k.self_hash().size() != 32 || !std::isfinite(k.weight()) || k.weight() <= 0) {
    return Status::Malformed(fmt::format(
        "secure round {}: client {}'s keys are malformed (32-byte keys and hash, a positive "
        "weight)",
        round_, id));
  }
  keys_[id] = k;
  return Status();
}

bool SecureRound::Complete(const std::set<int32_t>& live, bool every_holder) const {
  switch (phase_) {
    case Phase::kAdvertise:
      return std::all_of(selected_.begin(), selected_.end(),
                         [&](int32_t id) { return !live.contains(id) || keys_.contains(id); });
    case Phase::kShare:
      return std::all_of(keys_.begin(), keys_.end(), [&](const auto& k) {
        return !live.contains(k.first) || shared_.contains(k.first);
      });
    case Phase::kUnmask:  // every secret has its shares, or no live holder has more to give
      return (!every_holder && Enough()) ||
             std::all_of(shared_.begin(), shared_.end(),
                         [&](int32_t id) { return !live.contains(id) || revealed_.contains(id); });
    default:
      return false;
  }
}

Status SecureRound::CloseAdvertise() {
  phase_ = Phase::kShare;
  const int n = static_cast<int>(keys_.size());
  if (n < 2) {
    phase_ = Phase::kDone;
    return Status::FailedPrecondition(fmt::format(
        "secure round {}: {} client advertised keys; a sum needs at least two", round_, n));
  }
  params_ = options_.neighbours > 0
                ? secagg::GraphParams{std::min(options_.neighbours, n - 1),
                                      secagg::Threshold(std::min(options_.neighbours, n - 1))}
                : secagg::ChooseParams(n, options_.dropout);
  std::vector<int32_t> members;
  double weight = 0;
  for (const auto& [id, k] : keys_) {
    members.push_back(id);
    weight += k.weight();
  }
  neighbours_ =
      secagg::Neighbours(members, params_.neighbours, seed_ ^ static_cast<uint64_t>(round_));
  bits_ = secagg::FixedPointBits(weight);
  if (bits_ <= 0) {
    phase_ = Phase::kDone;
    return Status::FailedPrecondition(
        fmt::format("secure round {}: the uploads' weights sum to {:g}, too much for 32-bit words",
                    round_, weight));
  }
  return Status();
}

proto::SecAgg SecureRound::AdvertiseAnswer(int32_t id) const {
  proto::SecAgg a;
  a.set_phase(proto::SecAgg::ADVERTISE);
  a.set_round(round_);
  a.set_clip(options_.clip);
  a.set_bits(bits_);
  a.set_threshold(params_.threshold);
  if (auto n = neighbours_.find(id); n != neighbours_.end()) {
    for (int32_t v : n->second) *a.add_keys() = keys_.at(v);
  }
  return a;
}

Status SecureRound::Share(int32_t id, const proto::SecAgg& request) {
  if (Status s = CheckClient(id, Phase::kShare, "shares"); !s.ok()) return s;
  auto n = neighbours_.find(id);
  if (n == neighbours_.end()) {
    return Status::PermissionDenied(
        fmt::format("secure round {}: client {} did not advertise keys", round_, id));
  }
  if (shared_.contains(id)) {
    return Status::FailedPrecondition(
        fmt::format("secure round {}: client {} sent its shares already", round_, id));
  }
  const std::vector<int32_t>& near = n->second;
  std::set<int32_t> to;
  for (const proto::SecAggShare& s : request.shares()) {
    if (s.from() != id || !Contains(near, s.to()) || !to.insert(s.to()).second ||
        s.sealed().size() > kMaxSealedBytes) {
      return Status::Malformed(fmt::format(
          "secure round {}: client {}'s shares must be one sealed box from it to each of its {} "
          "neighbours",
          round_, id, near.size()));
    }
  }
  if (to.size() != near.size()) {
    return Status::Malformed(
        fmt::format("secure round {}: client {} sent {} shares for {} neighbours", round_, id,
                    to.size(), near.size()));
  }
  for (const proto::SecAggShare& s : request.shares()) inbox_[s.to()].push_back(s);
  shared_.insert(id);
  return Status();
}

Status SecureRound::CloseShare() {
  phase_ = Phase::kMasking;
  if (shared_.size() < 2) {
    phase_ = Phase::kDone;
    return Status::FailedPrecondition(
        fmt::format("secure round {}: {} client shared its secrets; a sum needs at least two",
                    round_, shared_.size()));
  }
  return Status();
}

proto::SecAgg SecureRound::ShareAnswer(int32_t id) const {
  proto::SecAgg a;
  a.set_phase(proto::SecAgg::SHARE);
  a.set_round(round_);
  if (auto in = inbox_.find(id); in != inbox_.end()) {
    for (const proto::SecAggShare& s : in->second) {
      if (shared_.contains(s.from())) *a.add_shares() = s;
    }
  }
  return a;
}

Status SecureRound::BeginUnmask(const std::vector<int32_t>& kept) {
  phase_ = Phase::kUnmask;
  kept_.clear();
  for (int32_t id : kept) {
    if (shared_.contains(id)) kept_.push_back(id);
  }
  std::sort(kept_.begin(), kept_.end());
  if (kept_.size() < 2) {
    phase_ = Phase::kDone;
    return Status::FailedPrecondition(
        fmt::format("secure round {}: {} upload kept; the sum of one would be that client's update",
                    round_, kept_.size()));
  }
  return Status();
}

bool SecureRound::Enough() const {
  auto has = [&](int32_t owner, bool self_mask) {
    auto it = reveals_.find({owner, self_mask});
    return it != reveals_.end() && it->second.size() >= static_cast<size_t>(params_.threshold);
  };
  return std::all_of(shared_.begin(), shared_.end(),
                     [&](int32_t id) { return has(id, Contains(kept_, id)); });
}

proto::SecAgg SecureRound::UnmaskRequest(int32_t id) const {
  proto::SecAgg r;
  r.set_phase(proto::SecAgg::UNMASK);
  r.set_round(round_);
  r.set_threshold(params_.threshold);
  r.set_kept(static_cast<int32_t>(kept_.size()));
  auto n = neighbours_.find(id);
  if (n == neighbours_.end()) return r;
  for (int32_t v : n->second) {
    if (!shared_.contains(v)) continue;
    if (Contains(kept_, v)) {
      r.add_survivors(v);
    } else {
      r.add_dropped(v);
    }
  }
  return r;
}

Status SecureRound::Reveal(int32_t id, const proto::SecAgg& request) {
  if (Status s = CheckClient(id, Phase::kUnmask, "revealed shares"); !s.ok()) return s;
  if (!shared_.contains(id)) {
    return Status::PermissionDenied(
        fmt::format("secure round {}: client {} holds no shares of this round", round_, id));
  }
  if (revealed_.contains(id)) {
    return Status::FailedPrecondition(
        fmt::format("secure round {}: client {} revealed its shares already", round_, id));
  }
  const std::vector<int32_t>& near = neighbours_.at(id);
  std::set<int32_t> owners;
  for (const proto::SecAggReveal& r : request.reveals()) {
    const bool known =  // its own share: only of its self-mask seed, when kept
        (r.owner() == id ? Contains(kept_, id) && r.self_mask() : Contains(near, r.owner())) &&
        shared_.contains(r.owner());
    if (!known || r.self_mask() != Contains(kept_, r.owner()) || !owners.insert(r.owner()).second ||
        r.share().size() != secagg::kSeedBytes) {
      return Status::Malformed(
          fmt::format("secure round {}: client {} revealed a share it was not asked for (owner {})",
                      round_, id, r.owner()));
    }
  }
  for (const proto::SecAggReveal& r : request.reveals()) {
    reveals_[{r.owner(), r.self_mask()}][id] = r.share();
  }
  revealed_.insert(id);
  return Status();
}

StatusOr<std::string> SecureRound::Rebuild(int32_t owner, bool self_mask) const {
  const char* what = self_mask ? "self-mask seed" : "mask key";
  auto it = reveals_.find({owner, self_mask});
  const size_t have = it == reveals_.end() ? 0 : it->second.size();
  if (have < static_cast<size_t>(params_.threshold)) {
    return Status::Unavailable(
        fmt::format("secure round {}: {} shares of client {}'s {}, {} needed", round_, have, owner,
                    what, params_.threshold));
  }
  std::vector<uint8_t> xs;
  std::vector<std::string> shares;
  for (const auto& [revealer, share] : it->second) {
    xs.push_back(secagg::SharePoint(neighbours_.at(owner), owner, revealer));
    shares.push_back(share);
    if (static_cast<int>(xs.size()) == params_.threshold) break;
  }
  auto secret = secagg::Combine(xs, shares);
  if (!secret.ok()) return secret.status();
  const proto::SecAggKeys& k = keys_.at(owner);
  const bool matches = self_mask ? secagg::Hash(*secret) == k.self_hash() : [&] {
    auto sk = secagg::KeyFrom(*secret, what);
    if (!sk.ok()) return false;
    const secagg::Key pk = secagg::PublicOf(*sk);
    return std::memcmp(pk.data(), k.mask_pk().data(), pk.size()) == 0;
  }();
  if (!matches) {
    return Status::Malformed(fmt::format(
        "secure round {}: client {}'s {} rebuilt from its shares is not the one it committed to",
        round_, owner, what));
  }
  return secret;
}

StatusOr<proto::SecureClose> SecureRound::Finish() {
  phase_ = Phase::kDone;
  proto::SecureClose close;
  close.set_clip(options_.clip);
  close.set_bits(bits_);
  for (int32_t u : kept_) {
    auto b = Rebuild(u, true);
    if (!b.ok()) return b.status();
    proto::MaskSeed* m = close.add_masks();
    m->set_seed(*b);
    m->set_sign(1);
  }
  for (int32_t v : shared_) {
    if (Contains(kept_, v)) continue;
    auto secret = Rebuild(v, false);
    if (!secret.ok()) return secret.status();
    auto sk = secagg::KeyFrom(*secret, "mask key");
    if (!sk.ok()) return sk.status();
    for (int32_t w : neighbours_.at(v)) {
      if (!Contains(kept_, w)) continue;
      auto pk = secagg::KeyFrom(keys_.at(w).mask_pk(), "mask key");
      if (!pk.ok()) return pk.status();
      auto seed = secagg::AgreeSeed(*sk, *pk, round_, v, w);
      if (!seed.ok()) return seed.status();
      proto::MaskSeed* m = close.add_masks();
      m->set_seed(seed->data(), seed->size());
      m->set_sign(w < v ? 1 : -1);  // how w's upload carries the pair's mask
    }
  }
  return close;
}

}  // namespace hetps
