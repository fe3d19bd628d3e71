// FedRounds' secure rounds (--secure_aggregation; the protocol is scheduler/secure_round.h):
// holding each phase's requests until every live selected client sent its own, answering them
// together, holding the kept uploads' reports until the round closes, and sending the close
// once the holders still there revealed enough to remove the masks.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>

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

void FedRounds::Secure(Arrival a, const proto::SecAgg& request, double now) {
  const bool open = secure_ && request.round() == secure_->round() &&
                    (state_ == State::kOpen ||
                     (state_ == State::kClosing && request.phase() == proto::SecAgg::UNMASK));
  if (!open && request.phase() == proto::SecAgg::UNMASK) {  // the round had enough shares
    return actions_.answer_secagg(a, UnmaskAck(request.round()));
  }
  if (!open) {
    return actions_.refuse(a, Status::FailedPrecondition(fmt::format(
                                  "no secure round {} is open for this step", request.round())));
  }
  Status s;
  switch (request.phase()) {
    case proto::SecAgg::ADVERTISE:
      s = secure_->Advertise(a.worker, request);
      break;
    case proto::SecAgg::SHARE:
      s = secure_->Share(a.worker, request);
      break;
    case proto::SecAgg::UNMASK:
      s = secure_->Reveal(a.worker, request);
      if (s.ok()) {  // answered at once: nothing waits for the other holders
        actions_.answer_secagg(a, UnmaskAck(request.round()));
        return MaybeAdvanceSecure(now);
      }
      break;
    default:
      s = Status::Malformed("a secure-aggregation request names no phase");
  }
  if (!s.ok()) {
    spdlog::warn("client {}: {}", a.worker, s.message());
    return actions_.refuse(a, s);
  }
  secure_waiting_[a.worker] = std::move(a);
  MaybeAdvanceSecure(now);
}

void FedRounds::MaybeAdvanceSecure(double now) {
  if (!secure_) return;
  const SecureRound::Phase phase = secure_->phase();
  if (phase == SecureRound::Phase::kUnmask) {
    const double wait = options_.deadline_s > 0 ? options_.deadline_s : kUnmaskWaitS;
    std::set<int32_t> holders;  // still there, and not back without reporting
    std::set_difference(selected_.begin(), selected_.end(), secure_back_.begin(),
                        secure_back_.end(), std::inserter(holders, holders.end()));
    if (secure_->Complete(holders, options_.virtual_time) || now >= secure_phase_at_ + wait) {
      FinishSecure(now);
    }
    return;
  }
  if ((phase != SecureRound::Phase::kAdvertise && phase != SecureRound::Phase::kShare) ||
      !secure_->Complete(selected_)) {
    return;
  }
  const bool advertise = phase == SecureRound::Phase::kAdvertise;
  const Status s = advertise ? secure_->CloseAdvertise() : secure_->CloseShare();
  for (const auto& [id, a] : std::exchange(secure_waiting_, {})) {
    if (!s.ok()) {
      actions_.refuse(a, s);
    } else {
      actions_.answer_secagg(a,
                             advertise ? secure_->AdvertiseAnswer(id) : secure_->ShareAnswer(id));
    }
  }
  secure_phase_at_ = now;
  if (!s.ok()) {
    spdlog::warn("{}", s.message());
    MaybeClose(last_live_workers_, now);  // the round cannot go on: it closes empty
  } else if (advertise) {
    spdlog::info("secure round {}: {} neighbours each, threshold {}, {} fixed-point bits",
                 secure_->round(), secure_->neighbours(), secure_->threshold(), secure_->bits());
  }
}

void FedRounds::CloseSecure(int live_workers, double now) {
  last_live_workers_ = live_workers;
  if (secure_->phase() != SecureRound::Phase::kMasking) {
    return AbortSecure(
        Status::FailedPrecondition(fmt::format(
            "secure round {} closed before its clients masked their uploads", secure_->round())),
        now);
  }
  if (Status s = secure_->BeginUnmask(uploads_); !s.ok()) return AbortSecure(s, now);
  const std::vector<int32_t>& kept = secure_->kept();
  for (const auto& [id, a] : std::exchange(secure_uploads_, {})) {
    proto::FedRound answer;
    answer.set_round(round_);
    answer.set_kept(std::binary_search(kept.begin(), kept.end(), id));
    if (answer.kept()) *answer.mutable_secagg() = secure_->UnmaskRequest(id);
    AnswerUpload(a, answer);
  }
  secure_phase_at_ = now;
  MaybeAdvanceSecure(now);
}

void FedRounds::FinishSecure(double now) {
  auto unmask = secure_->Finish();
  if (!unmask.ok()) return AbortSecure(unmask.status(), now);
  closing_.clear_workers();
  for (int32_t id : secure_->kept()) closing_.add_workers(id);
  StepClipSecure(*unmask);
  *closing_.mutable_secure() = std::move(*unmask);
  spdlog::info("secure round {}: {} uploads unmasked ({} masks removed by the servers)",
               secure_->round(), secure_->kept().size(), closing_.secure().masks_size());
  secure_.reset();
  ++secure_unmasked_;
  SendClose(last_live_workers_, now);
}

void FedRounds::AbortSecure(const Status& why, double now) {
  spdlog::warn("secure round {} applies nothing: {}", round_, why.message());
  ++secure_aborted_;
  for (const auto& [id, a] : std::exchange(secure_waiting_, {})) actions_.refuse(a, why);
  for (const auto& [id, a] : std::exchange(secure_uploads_, {})) {
    proto::FedRound answer;
    answer.set_round(round_);
    answer.set_kept(false);
    AnswerUpload(a, answer);
  }
  for (int32_t id : uploads_) {  // uploaded, but not applied: dropped, as the log counts
    ClientRecord& c = clients_[id];
    c.kept = std::max<int64_t>(0, c.kept - 1);
    ++c.missed;
    Dropped(id);
  }
  uploads_.clear();
  closing_.clear_workers();
  closing_.clear_secure();
  count_words_.reset();  // nothing was learnt: the clip stays
  secure_.reset();
  SendClose(last_live_workers_, now);
}

}  // namespace hetps
