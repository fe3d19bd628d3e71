#include "scheduler/checkpoints.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include "common/cluster_view.h"
#include "common/cut.h"
#include "common/message.h"

namespace hetps {
namespace {

constexpr int kMaxTries = 10;

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

}  // namespace

Checkpoints::Checkpoints(CheckpointOptions options, Actions actions)
    : options_(std::move(options)), actions_(std::move(actions)) {
  next_periodic_ = options_.every_clocks;
}

void Checkpoints::Request(const Arrival& requester, double now) {
  if (!enabled()) {
    proto::Header req;
    req.set_request_id(requester.request_id);
    actions_.reply(requester,
                   ErrorReply(req,
                              Status::FailedPrecondition(
                                  "this scheduler has no --checkpoint_dir; restart it with one"),
                              kSchedulerId));
    return;
  }
  requesters_.push_back(requester);
  if (attempt_ && attempt_->periodic) CallOff("an operator asked for one now", now, false);
}

void Checkpoints::Tick(int64_t clock, bool ready, double now) {
  floor_ = std::max(floor_, clock);
  if (!enabled() || attempt_ || now < retry_at_ || !ready) return;
  // First the furthest clock known (a worker waiting there is cut at once), then one past
  // what the refusing server had served, then further ahead each time.
  const int64_t margin = tries_ == 0 ? 0 : int64_t{1} << std::min(tries_ - 1, 20);
  if (!requesters_.empty()) return Start(floor_ + margin, false, now);
  if (options_.every_clocks <= 0) return;
  if (next_periodic_ <= floor_ + margin) {
    // Missed (or called off): the next multiple far enough ahead.
    const int64_t ahead = floor_ + std::max<int64_t>(margin, 1);
    next_periodic_ =
        (ahead + options_.every_clocks - 1) / options_.every_clocks * options_.every_clocks;
  }
  Start(next_periodic_, true, now);
}

void Checkpoints::Start(int64_t clock, bool periodic, double now) {
  const std::vector<int32_t> servers = actions_.live_servers();
  if (servers.empty()) return;
  attempt_.emplace();
  attempt_->id = next_id_++;
  attempt_->clock = clock;
  attempt_->periodic = periodic;
  attempt_->started = now;
  attempt_->asked = {servers.begin(), servers.end()};
  attempt_->waiting = attempt_->asked;
  proto::Header h;
  h.set_type(proto::CHECKPOINT);
  h.set_sender(kSchedulerId);
  h.set_request_id(attempt_->id);
  h.mutable_cut()->set_clock(clock);
  h.mutable_cut()->set_dir(CutDir(options_.dir, clock));
  for (int32_t s : servers) actions_.send(s, h);
  spdlog::info("checkpoint at clock {} requested from {} servers", clock, servers.size());
}

void Checkpoints::OnAnswer(int32_t server, const proto::Header& h, double now) {
  // An answer to a previous incarnation of this scheduler (ids start again at 1) names another
  // clock: ignored like any other stale answer.
  if (!attempt_ || h.request_id() != attempt_->id || h.cut().clock() != attempt_->clock ||
      !attempt_->waiting.erase(server)) {
    return;
  }
  if (h.type() == proto::CHECKPOINT_DONE) {
    attempt_->bytes += h.cut().bytes();
    attempt_->seconds = std::max(attempt_->seconds, h.cut().seconds());
  } else if (h.error() == StatusCode::kAborted || h.error() == StatusCode::kUnavailable) {
    floor_ = std::max(floor_, h.cut().seen_clock());
    if (h.error() == StatusCode::kUnavailable) retry_at_ = now + 0.2;
    spdlog::info("server {} cannot take a checkpoint at clock {}: {}", server, attempt_->clock,
                 h.error_message());
    return CallOff("a server refused", now);
  } else if (attempt_->failed.ok()) {
    attempt_->failed =
        Status(StatusOf(h).code(), fmt::format("server {}: {}", server, h.error_message()));
  }
  if (!attempt_->waiting.empty()) return;
  if (!attempt_->failed.ok()) {
    spdlog::error("checkpoint at clock {} failed: {}", attempt_->clock,
                  attempt_->failed.ToString());
    Fail(attempt_->failed);
    if (attempt_->periodic) next_periodic_ = attempt_->clock + options_.every_clocks;
    attempt_.reset();
    return;
  }
  Complete(now);
}

void Checkpoints::OnServerDead(int32_t server, double now) {
  if (!attempt_ || attempt_->asked.erase(server) == 0) return;
  CallOff("a server died", now);
}

void Checkpoints::Abandon(double now) {
  if (attempt_) CallOff("every worker finished", now, /*retry=*/false);
}

void Checkpoints::CallOff(const char* why, double now, bool retry) {
  proto::Header h;
  h.set_type(proto::CHECKPOINT);
  h.set_sender(kSchedulerId);
  h.set_request_id(attempt_->id);
  h.mutable_cut()->set_clock(attempt_->clock);
  h.mutable_cut()->set_abort(true);
  for (int32_t s : attempt_->asked) actions_.send(s, h);
  spdlog::info("checkpoint at clock {} called off ({}){}", attempt_->clock, why,
               retry ? "; trying further ahead" : "");
  attempt_.reset();
  if (!retry) return;
  if (++tries_ >= kMaxTries) {
    Fail(Status::Aborted(fmt::format(
        "no clock boundary could be cut in {} attempts (servers kept refusing or dying)",
        kMaxTries)));
    tries_ = 0;
    retry_at_ = now + 1;
  }
}

void Checkpoints::Complete(double now) {
  const std::string dir = CutDir(options_.dir, attempt_->clock);
  proto::CutManifest manifest = actions_.describe();
  manifest.set_format(kCutFormat);
  manifest.set_clock(attempt_->clock);
  manifest.set_bytes(attempt_->bytes);
  manifest.set_seconds(attempt_->seconds);
  manifest.set_written_at(UtcNow());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (Status s = WriteManifest(dir, manifest); !s.ok()) {
    spdlog::error("checkpoint at clock {}: {}", attempt_->clock, s.ToString());
    Fail(s);
  } else {
    const int removed = PruneCuts(options_.dir, options_.keep);
    spdlog::info(
        "checkpoint at clock {} complete: {:.1f} MiB written in {:.2f} s ({:.2f} s after "
        "the request), {}{}",
        attempt_->clock, attempt_->bytes / 1048576.0, manifest.seconds(), now - attempt_->started,
        dir, removed > 0 ? fmt::format(" ({} older removed)", removed) : "");
    proto::Header r;
    r.set_type(proto::CHECKPOINT);
    r.set_sender(kSchedulerId);
    r.mutable_cut()->set_clock(attempt_->clock);
    r.mutable_cut()->set_dir(dir);
    r.mutable_cut()->set_bytes(attempt_->bytes);
    r.mutable_cut()->set_seconds(manifest.seconds());
    for (const Arrival& a : requesters_) {
      r.set_request_id(a.request_id);
      actions_.reply(a, r);
    }
    requesters_.clear();
    if (actions_.completed) actions_.completed(r.cut());
  }
  if (attempt_->periodic) next_periodic_ = attempt_->clock + options_.every_clocks;
  tries_ = 0;
  attempt_.reset();
}

void Checkpoints::Shutdown() {
  Fail(Status::Aborted("the cluster shut down before a checkpoint was complete"));
}

void Checkpoints::Fail(const Status& s) {
  for (const Arrival& a : requesters_) {
    proto::Header req;
    req.set_request_id(a.request_id);
    actions_.reply(a, ErrorReply(req, s, kSchedulerId));
  }
  requesters_.clear();
}

}  // namespace hetps
