#include "worker/secure_aggregation.h"

#include <fmt/format.h>
#include <sodium.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "common/secagg/graph.h"

namespace hetps {
namespace {

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Adds the thread CPU time of its scope to `total`.
class CpuTimer {
 public:
  explicit CpuTimer(double& total) : total_(total), start_(ThreadCpuSeconds()) {}
  ~CpuTimer() { total_ += ThreadCpuSeconds() - start_; }

 private:
  double& total_;
  double start_;
};

std::string Bytes(const secagg::Key& k) {
  return {reinterpret_cast<const char*>(k.data()), k.size()};
}

}  // namespace

SecureUpload::SecureUpload(int32_t self, Exchange exchange)
    : self_(self), exchange_(std::move(exchange)) {}

void SecureUpload::Reset() {
  sodium_memzero(mask_.sk.data(), mask_.sk.size());
  sodium_memzero(cipher_.sk.data(), cipher_.sk.size());
  sodium_memzero(self_seed_.data(), self_seed_.size());
  neighbours_.clear();
  revealed_.clear();
  ready_ = false;
  round_ = -1;
}

StatusOr<proto::SecAgg> SecureUpload::Send(const proto::SecAgg& request) {
  bytes_ += static_cast<int64_t>(request.ByteSizeLong());
  auto answer = exchange_(request);
  if (answer.ok()) bytes_ += static_cast<int64_t>(answer->ByteSizeLong());
  return answer;
}

Status SecureUpload::Setup(const proto::SecAgg& task, double weight) {
  Reset();
  if (!(task.clip() > 0)) {
    return Status::Malformed(fmt::format("a secure round's clip of {:g}", task.clip()));
  }
  round_ = task.round();
  fp_.clip = task.clip();
  if (Status s = Advertise(weight); !s.ok()) return s;
  if (Status s = ShareSecrets(); !s.ok()) return s;
  ready_ = true;
  return Status();
}

Status SecureUpload::Advertise(double weight) {
  proto::SecAgg request;
  {
    CpuTimer timer(cpu_s_);
    cipher_ = secagg::NewKeyPair();
    mask_ = secagg::NewKeyPair();
    self_seed_ = secagg::RandomSeed();
    weight_ = weight;
    request.set_phase(proto::SecAgg::ADVERTISE);
    request.set_round(round_);
    proto::SecAggKeys* k = request.add_keys();
    k->set_worker(self_);
    k->set_cipher_pk(Bytes(cipher_.pk));
    k->set_mask_pk(Bytes(mask_.pk));
    k->set_weight(weight);
    k->set_self_hash(secagg::Hash(Bytes(self_seed_)));
  }
  auto answer = Send(request);
  if (!answer.ok()) return answer.status();
  CpuTimer timer(cpu_s_);
  fp_.bits = answer->bits();
  threshold_ = answer->threshold();
  if (answer->round() != round_ || fp_.bits <= 0 || fp_.bits > 30 || threshold_ < 1 ||
      threshold_ > answer->keys_size() + 1 || answer->keys_size() > secagg::kMaxNeighbours) {
    return Status::Malformed(fmt::format(
        "secure round {}: the keys' answer is malformed (round {}, {} bits, threshold {} of {})",
        round_, answer->round(), fp_.bits, threshold_, answer->keys_size()));
  }
  for (const proto::SecAggKeys& k : answer->keys()) {
    if (k.worker() == self_ || neighbours_.contains(k.worker()) ||
        k.cipher_pk().size() != secagg::kKeyBytes || k.mask_pk().size() != secagg::kKeyBytes) {
      return Status::Malformed(
          fmt::format("secure round {}: neighbour {}'s keys are malformed", round_, k.worker()));
    }
    neighbours_[k.worker()].keys = k;
  }
  return Status();
}

Status SecureUpload::ShareSecrets() {
  proto::SecAgg request;
  {
    CpuTimer timer(cpu_s_);
    std::vector<uint8_t> xs;  // the neighbours' points, then this client's own
    for (size_t i = 0; i <= neighbours_.size(); ++i) xs.push_back(static_cast<uint8_t>(i + 1));
    const auto self_shares = secagg::Split(Bytes(self_seed_), xs, threshold_);
    const auto key_shares = secagg::Split(Bytes(mask_.sk), xs, threshold_);
    own_self_share_ = self_shares.back();  // its key's own share is never revealed: not kept
    request.set_phase(proto::SecAgg::SHARE);
    request.set_round(round_);
    size_t i = 0;
    for (const auto& [id, n] : neighbours_) {  // in id order: share point i + 1
      proto::SecAggSharePlain plain;
      plain.set_from(self_);
      plain.set_to(id);
      plain.set_round(round_);
      plain.set_self_share(self_shares[i]);
      plain.set_key_share(key_shares[i]);
      auto pk = secagg::KeyFrom(n.keys.cipher_pk(), "cipher key");
      if (!pk.ok()) return pk.status();
      auto sealed = secagg::Seal(plain.SerializeAsString(), *pk, cipher_.sk);
      if (!sealed.ok()) return sealed.status();
      proto::SecAggShare* s = request.add_shares();
      s->set_from(self_);
      s->set_to(id);
      s->set_sealed(std::move(*sealed));
      ++i;
    }
  }
  auto answer = Send(request);
  if (!answer.ok()) return answer.status();
  return TakeShares(*answer);
}

Status SecureUpload::TakeShares(const proto::SecAgg& answer) {
  CpuTimer timer(cpu_s_);
  for (const proto::SecAggShare& s : answer.shares()) {
    auto n = neighbours_.find(s.from());
    if (n == neighbours_.end() || s.to() != self_ || n->second.shared) {
      return Status::Malformed(
          fmt::format("secure round {}: a share from {} that is not a neighbour's, or twice",
                      round_, s.from()));
    }
    auto pk = secagg::KeyFrom(n->second.keys.cipher_pk(), "cipher key");
    if (!pk.ok()) return pk.status();
    auto plain = secagg::Open(s.sealed(), *pk, cipher_.sk);
    if (!plain.ok()) {
      return Status::Malformed(fmt::format("secure round {}: neighbour {}'s share: {}", round_,
                                           s.from(), plain.status().message()));
    }
    proto::SecAggSharePlain p;
    if (!p.ParseFromString(*plain) || p.from() != s.from() || p.to() != self_ ||
        p.round() != round_ || p.self_share().size() != secagg::kSeedBytes ||
        p.key_share().size() != secagg::kKeyBytes) {
      return Status::Malformed(fmt::format(
          "secure round {}: neighbour {}'s share names another sender, recipient or round "
          "(a replay?)",
          round_, s.from()));
    }
    auto mask_pk = secagg::KeyFrom(n->second.keys.mask_pk(), "mask key");
    if (!mask_pk.ok()) return mask_pk.status();
    auto seed = secagg::AgreeSeed(mask_.sk, *mask_pk, round_, self_, s.from());
    if (!seed.ok()) return seed.status();
    n->second.self_share = p.self_share();
    n->second.key_share = p.key_share();
    n->second.pair_seed = *seed;
    n->second.shared = true;
  }
  return Status();
}

void SecureUpload::Mask(int32_t tensor, int64_t offset, const float* x, int64_t n,
                        uint32_t* words) const {
  CpuTimer timer(cpu_s_);
  secagg::Encode(x, n, weight_, fp_, words);
  secagg::AddMask(self_seed_, round_, tensor, offset, n, 1, words);
  for (const auto& [id, nb] : neighbours_) {
    if (!nb.shared) continue;
    secagg::AddMask(nb.pair_seed, round_, tensor, offset, n, self_ < id ? 1 : -1, words);
  }
}

uint32_t SecureUpload::MaskCount(double value, const secagg::FixedPoint& fp) const {
  CpuTimer timer(cpu_s_);
  const float x = static_cast<float>(value);
  uint32_t word = 0;
  secagg::Encode(&x, 1, 1.0, fp, &word);
  secagg::AddMask(self_seed_, round_, secagg::kCountTensor, 0, 1, 1, &word);
  for (const auto& [id, nb] : neighbours_) {
    if (nb.shared) {
      secagg::AddMask(nb.pair_seed, round_, secagg::kCountTensor, 0, 1, self_ < id ? 1 : -1, &word);
    }
  }
  return word;
}

Status SecureUpload::Unmask(const proto::SecAgg& request, bool kept) {
  CpuTimer timer(cpu_s_);
  if (request.round() != round_ || !ready_) {
    return Status::FailedPrecondition(
        fmt::format("an unmasking request for round {}; this client is in secure round {}",
                    request.round(), round_));
  }
  std::map<int32_t, bool> asked;  // owner -> self-mask share
  for (int32_t v : request.survivors()) asked[v] = true;
  for (int32_t v : request.dropped()) {
    if (asked.contains(v)) {
      return Status::PermissionDenied(
          fmt::format("secure round {}: asked for both secrets of client {}: refused", round_, v));
    }
    asked[v] = false;
  }
  if (request.kept() < 2) {
    return Status::PermissionDenied(fmt::format(
        "secure round {}: a sum of {} upload would be that client's update: nothing revealed",
        round_, request.kept()));
  }
  proto::SecAgg reveal;
  reveal.set_phase(proto::SecAgg::UNMASK);
  reveal.set_round(round_);
  if (kept) {  // its b is rebuilt anyway
    proto::SecAggReveal* own = reveal.add_reveals();
    own->set_owner(self_);
    own->set_self_mask(true);
    own->set_share(own_self_share_);
  }
  for (const auto& [v, self_mask] : asked) {
    auto n = neighbours_.find(v);
    if (n == neighbours_.end() || !n->second.shared) {
      return Status::PermissionDenied(fmt::format(
          "secure round {}: asked for a share of {}, who shared none with it", round_, v));
    }
    if (auto r = revealed_.find(v); r != revealed_.end() && r->second != self_mask) {
      return Status::PermissionDenied(
          fmt::format("secure round {}: asked for client {}'s other secret: refused", round_, v));
    }
    proto::SecAggReveal* r = reveal.add_reveals();
    r->set_owner(v);
    r->set_self_mask(self_mask);
    r->set_share(self_mask ? n->second.self_share : n->second.key_share);
  }
  for (const auto& [v, self_mask] : asked) revealed_[v] = self_mask;
  auto answer = Send(reveal);
  return answer.ok() ? Status() : answer.status();
}

}  // namespace hetps
