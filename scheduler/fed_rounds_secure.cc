// FedRounds' secure rounds (--secure_aggregation; the protocol is scheduler/secure_round.h):
// holding each phase's requests until every live member sent its own, answering them together,
// holding the kept uploads' reports until the round closes, and sending the close once the
// holders still there revealed enough to remove the masks. The same for a synchronous round
// (secure_) and for each of FedBuff's cohorts (cohorts_, fed_rounds_cohorts.cc).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "scheduler/fed_rounds.h"

namespace hetps {
namespace {

// How long the unmasking waits for the holders' shares without a round deadline.
constexpr double kUnmaskWaitS = 30;

// The answer to an UNMASK request: its shares are taken (or no longer needed).
proto::SecAgg UnmaskAck(int64_t round) {
  proto::SecAgg ack;
  ack.set_phase(proto::SecAgg::UNMASK);
  ack.set_round(round);
  return ack;
}

}  // namespace

const FedRounds::SecureCohort* FedRounds::CohortOf(int64_t round) const {
  if (async()) {
    auto it = cohorts_.find(round);
    return it == cohorts_.end() ? nullptr : &it->second;
  }
  return secure_ && secure_->protocol->round() == round ? secure_.get() : nullptr;
}

FedRounds::SecureCohort* FedRounds::CohortOf(int64_t round) {
  return const_cast<SecureCohort*>(std::as_const(*this).CohortOf(round));
}

void FedRounds::Secure(Arrival a, const proto::SecAgg& request, double now) {
  SecureCohort* c = CohortOf(request.round());
  const bool unmasking = c != nullptr && c->protocol->phase() == SecureRound::Phase::kUnmask;
  const bool open = c != nullptr && (request.phase() == proto::SecAgg::UNMASK
                                         ? unmasking
                                         : !unmasking && state_ != State::kClosing);
  if (!open && request.phase() == proto::SecAgg::UNMASK) {  // the round had enough shares
    return actions_.answer_secagg(a, UnmaskAck(request.round()));
  }
  if (!open) {
    return actions_.refuse(a, Status::FailedPrecondition(fmt::format(
                                  "no secure round {} is open for this step", request.round())));
  }
  SecureRound& protocol = *c->protocol;
  Status s;
  switch (request.phase()) {
    case proto::SecAgg::ADVERTISE:
      s = protocol.Advertise(a.worker, request);
      break;
    case proto::SecAgg::SHARE:
      s = protocol.Share(a.worker, request);
      break;
    case proto::SecAgg::UNMASK:
      s = protocol.Reveal(a.worker, request);
      if (s.ok()) {  // answered at once: nothing waits for the other holders
        actions_.answer_secagg(a, UnmaskAck(request.round()));
        return MaybeAdvanceSecure(*c, now);
      }
      break;
    default:
      s = Status::Malformed("a secure-aggregation request names no phase");
  }
  if (!s.ok()) {
    spdlog::warn("client {}: {}", a.worker, s.message());
    return actions_.refuse(a, s);
  }
  c->waiting[a.worker] = std::move(a);
  MaybeAdvanceSecure(*c, now);
}

void FedRounds::MaybeAdvanceSecure(double now) {
  if (secure_) MaybeAdvanceSecure(*secure_, now);
  for (auto it = cohorts_.begin(); it != cohorts_.end();) {
    SecureCohort& c = (it++)->second;  // it may finish and leave
    MaybeAdvanceSecure(c, now);
  }
}

void FedRounds::MaybeAdvanceSecure(SecureCohort& c, double now) {
  SecureRound& protocol = *c.protocol;
  const SecureRound::Phase phase = protocol.phase();
  if (phase == SecureRound::Phase::kUnmask) {
    const double wait = options_.deadline_s > 0 ? options_.deadline_s : kUnmaskWaitS;
    std::set<int32_t> holders;  // still there, and not back without reporting
    const std::set<int32_t>& members = Members(c);
    std::set_difference(members.begin(), members.end(), c.back.begin(), c.back.end(),
                        std::inserter(holders, holders.end()));
    if (protocol.Complete(holders, options_.virtual_time) || now >= c.phase_at + wait) {
      FinishSecure(c, now);
    }
    return;
  }
  if ((phase != SecureRound::Phase::kAdvertise && phase != SecureRound::Phase::kShare) ||
      !protocol.Complete(Members(c))) {
    return;
  }
  const bool advertise = phase == SecureRound::Phase::kAdvertise;
  const Status s = advertise ? protocol.CloseAdvertise() : protocol.CloseShare();
  for (const auto& [id, a] : std::exchange(c.waiting, {})) {
    if (!s.ok()) {
      actions_.refuse(a, s);
    } else {
      actions_.answer_secagg(a,
                             advertise ? protocol.AdvertiseAnswer(id) : protocol.ShareAnswer(id));
    }
  }
  c.phase_at = now;
  if (!s.ok()) {
    if (async()) return AbortSecure(c, s, now);  // the cohort cannot go on
    spdlog::warn("{}", s.message());
    return MaybeClose(last_live_workers_, now);  // the round cannot go on: it closes empty
  }
  if (advertise) {
    spdlog::info("secure round {}: {} neighbours each, threshold {}, {} fixed-point bits",
                 protocol.round(), protocol.neighbours(), protocol.threshold(), protocol.bits());
  }
}

// The round keeps `kept`: each held upload report is answered (kept, with what to reveal, or
// not), and the holders' reveals are awaited.
Status FedRounds::BeginUnmasking(SecureCohort& c, const std::vector<int32_t>& kept, double now) {
  SecureRound& protocol = *c.protocol;
  if (protocol.phase() != SecureRound::Phase::kMasking) {
    return Status::FailedPrecondition(fmt::format(
        "secure round {} closed before its clients masked their uploads", protocol.round()));
  }
  if (Status s = protocol.BeginUnmask(kept); !s.ok()) return s;
  const std::vector<int32_t>& unmasked = protocol.kept();
  for (const auto& [id, a] : std::exchange(c.uploads, {})) {
    proto::FedRound answer;
    answer.set_round(protocol.round());
    answer.set_kept(std::binary_search(unmasked.begin(), unmasked.end(), id));
    if (answer.kept()) *answer.mutable_secagg() = protocol.UnmaskRequest(id);
    AnswerUpload(a, answer);
  }
  c.phase_at = now;
  MaybeAdvanceSecure(c, now);
  return Status();
}

void FedRounds::CloseSecure(int live_workers, double now) {
  last_live_workers_ = live_workers;
  if (Status s = BeginUnmasking(*secure_, uploads_, now); !s.ok()) {
    return AbortSecure(*secure_, s, now);
  }
}

void FedRounds::FinishSecure(SecureCohort& c, double now) {
  auto unmask = c.protocol->Finish();
  if (!unmask.ok()) return AbortSecure(c, unmask.status(), now);
  const SecureRound& protocol = *c.protocol;
  spdlog::info("secure round {}: {} uploads unmasked ({} masks removed by the servers)",
               protocol.round(), protocol.kept().size(), unmask->masks_size());
  ++secure_unmasked_;
  if (async()) return FinishCohort(c, std::move(*unmask), now);
  closing_.clear_workers();
  for (int32_t id : protocol.kept()) closing_.add_workers(id);
  StepClipSecure(protocol.round(), *unmask);
  *closing_.mutable_secure() = std::move(*unmask);
  secure_.reset();
  SendClose(last_live_workers_, now);
}

// Nothing of `c` is applied: its held requests are refused, its held upload reports answered
// "not kept", and `counted`, the uploads it had kept, are dropped, as the log counts them.
void FedRounds::ReleaseAborted(SecureCohort& c, const std::vector<int32_t>& counted,
                               const Status& why) {
  for (const auto& [id, a] : std::exchange(c.waiting, {})) actions_.refuse(a, why);
  for (const auto& [id, a] : std::exchange(c.uploads, {})) {
    proto::FedRound answer;
    answer.set_round(c.protocol->round());
    answer.set_kept(false);
    AnswerUpload(a, answer);
  }
  for (int32_t id : counted) {
    ClientRecord& record = clients_[id];
    record.kept = std::max<int64_t>(0, record.kept - 1);
    ++record.missed;
    Dropped(id);
  }
}

void FedRounds::AbortSecure(SecureCohort& c, const Status& why, double now) {
  spdlog::warn("secure round {} applies nothing: {}", c.protocol->round(), why.message());
  ++secure_aborted_;
  if (async()) return AbortCohort(c, why, now);
  ReleaseAborted(c, uploads_, why);
  uploads_.clear();
  closing_.clear_workers();
  closing_.clear_secure();
  count_words_.reset();  // nothing was learnt: the clip stays
  secure_.reset();
  SendClose(last_live_workers_, now);
}

}  // namespace hetps
