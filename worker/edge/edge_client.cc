#include "worker/edge/edge_client.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>

#include "common/privacy.h"
#include "worker/edge/attack.h"
#include "worker/edge/availability.h"
#include "worker/edge/virtual_round.h"
#include "worker/layer_schedule.h"
#include "worker/secure_aggregation.h"
#include "worker/train/partitioner.h"
#include "worker/train/run_log.h"
#include "worker/train/shared_images.h"
#include "worker/train/tensor_requests.h"

namespace hetps {
namespace {

using Clock = std::chrono::steady_clock;

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

Status WriteModel(const std::string& path, const Params& params) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const std::vector<float>& p : params) {
    out.write(reinterpret_cast<const char*>(p.data()),
              static_cast<std::streamsize>(p.size() * sizeof(float)));
  }
  if (!out.flush()) return Status::Internal(fmt::format("cannot write the model to {}", path));
  return Status();
}

class EdgeClient {
 public:
  EdgeClient(Client& client, const EdgeOptions& options) : client_(client), o_(options) {}

  // Maps the data, keeps this client's shard, builds the model and declares its tensors.
  Status Prepare();
  // One round: pull, train locally, upload the delta, then Clock() (every client each round) or
  // FinishRound() (federated rounds the scheduler samples: `federated`). Sets `abandoned` when
  // the client failed or went offline in the middle of it (federated only).
  Status Round(bool federated, bool& abandoned);
  // Federated rounds: waits while the client is offline; then it asks for a round.
  Status WaitOnline(const std::atomic<bool>& stop);
  void Selected() { selected_s_ = Now(); }
  // Rank 0: evaluation of the model pulled this round, the progress line and the run's rows.
  Status Observe();
  // An evaluator's whole run (evaluators > 0): every eval_every closed rounds, the global model's
  // test loss and accuracy.
  Status Evaluate(const std::atomic<bool>& stop);
  bool evaluator() const { return client_.rank() < o_.evaluators; }
  Status Finish();

 private:
  Status LoadData();
  Status Attacker();
  void MakeDelta();
  void Privatize();
  int Clients() const { return client_.num_workers() - o_.evaluators; }
  int Shard() const { return (client_.rank() - o_.evaluators) % Clients(); }
  Status PullGlobal();
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  // Pushes the delta's tensors t with sends(t), with the shard's size as weight, and waits.
  Status PushDelta(const std::function<bool(size_t)>& sends);
  std::function<bool(size_t)> LayersToSend();
  // Pushes the first half of the delta's tensors (at least one) and gives the round up.
  Status Abandon(const char* why);
  // Secure rounds (the scheduler's --secure_aggregation): phases 0 and 1 right after selection,
  // the masked words of tensor t for a push, and the unmasking once the round kept the upload.
  Status SetupSecure();
  std::vector<uint32_t> MaskedTensor(size_t t) const;
  void UnmaskSecure(bool kept);
  void Progress(int64_t round, const std::string& what);

  Client& client_;
  const EdgeOptions& o_;
  Dataset shard_;
  std::optional<Dataset> test_;  // rank 0 and evaluators only
  std::unique_ptr<Model> model_;
  std::vector<TensorSpec> tensors_;
  Params global_, local_, grads_;
  std::mt19937_64 rng_;
  std::optional<RunLog> log_;
  Clock::time_point start_;
  double loss_ = 0;
  double train_s_ = 0;
  int64_t rounds_done_ = 0;              // rounds of the run finished, as of this client's last one
  int64_t participated_ = 0, kept_ = 0;  // federated rounds: selected for, and kept in
  int64_t abandoned_ = 0;                // federated rounds given up (failure, offline)
  std::unique_ptr<Availability> availability_;
  std::optional<LayerSchedule> schedule_;   // deep_from >= 0
  std::optional<LayerAccumulator> layers_;  // else: the scheduler's layer-wise schedule
  std::mt19937_64 fail_rng_;        // its own stream: failures do not change the sample order
  std::unique_ptr<Attack> attack_;  // a Byzantine client's attack (--byzantine_fraction)
  std::mt19937_64 attack_rng_;
  Privacy dp_;                           // --dp
  Client::ClipBit clip_bit_;             // adaptive clipping: this round's report
  std::mt19937_64 dp_rng_;               // its local noise
  double selected_s_ = 0;                // when the current round selected it
  std::optional<VirtualRound> virtual_;  // --clock=virtual
  std::optional<SecureUpload> secure_;   // made at the first secure round
  int64_t secure_rounds_ = 0;
  int secure_kept_ = 1;  // the open secure round's K
  // The client's time: virtual, or seconds since Prepare.
  double Now() const { return virtual_ ? client_.virtual_time() : Seconds(); }
  // Virtual time: the round's download, training and upload (bytes from the client's counts).
  void VirtualDownload(int64_t pulled_before);
  void VirtualTraining();
  void VirtualUpload(int64_t pushed_before);
  // A row of the run's metrics, stamped with the client's time (virtual time: its seconds).
  void Record(int64_t round, double loss, std::optional<double> accuracy, int64_t staleness) {
    const double at = virtual_ ? Now() : RunLog::Now();
    log_->RecordAt(at, round, client_.rank(), loss, accuracy, staleness);
  }
};

// Whether this client is one of the scenario's attackers; if so its attack poisons its labels
// now (label_flip) and its uploads later.
Status EdgeClient::Attacker() {
  if (!IsByzantine(o_.byzantine_fraction, o_.seed, Shard(), Clients())) return Status();
  auto attack = MakeAttack(o_.attack);
  if (!attack.ok()) return attack.status();
  attack_ = std::move(*attack);
  attack_->PoisonLabels(shard_.classes, shard_.y);
  attack_rng_.seed(o_.seed * 31337 + static_cast<uint64_t>(client_.rank()));
  spdlog::info("client {} is Byzantine: {}", client_.rank(), o_.attack);
  return Status();
}

Status EdgeClient::LoadData() {
  auto train = OpenTrainSet(o_);
  if (!train.ok()) return train.status();
  const int clients = Clients();
  if (clients < 1) {
    return Status::InvalidArgument(
        fmt::format("{} evaluators leave no training client among {} workers", o_.evaluators,
                    client_.num_workers()));
  }
  const std::vector<std::vector<int64_t>> parts =
      SplitSamples(o_, train->labels(), train->classes(), clients);
  if (evaluator()) {
    shard_ = train->Gather({});  // the shape only
  } else {
    shard_ = train->Gather(parts[Shard()]);
    if (Status s = Attacker(); !s.ok()) return s;
    const auto histogram = LabelHistogram({parts[Shard()]}, train->labels(), train->classes());
    spdlog::info("client {} trains on {} samples, labels [{}], device {}slowdown {:.2f}",
                 client_.rank(), shard_.size, fmt::join(histogram[0], " "),
                 o_.device_kind.empty() ? "" : o_.device_kind + ", ", o_.slowdown);
  }
  if (client_.rank() == 0 || evaluator()) {
    auto test = LoadTestSet(o_);
    if (!test.ok()) return test.status();
    test_ = std::move(*test);
  }
  return Status();
}

Status EdgeClient::Prepare() {
  if (Status s = LoadData(); !s.ok()) return s;
  auto made = MakeWorkloadModel(o_, client_.rank(), shard_.rows, shard_.cols, shard_.classes);
  if (!made.ok()) return made.status();
  model_ = std::move(*made);
  tensors_ = model_->Tensors();
  if (Status s = DeclareAndInit(client_, *model_, o_.seed, global_); !s.ok()) return s;
  local_ = model_->Zeros();
  std::vector<LayerAccumulator::Tensor> shapes;
  for (const TensorSpec& t : tensors_) shapes.push_back({t.layer, t.NumElements()});
  layers_.emplace(std::move(shapes));
  grads_ = model_->Zeros();
  rng_.seed(o_.seed * 1000003 + static_cast<uint64_t>(client_.rank()));
  fail_rng_.seed(o_.seed * 7919 + 17 * static_cast<uint64_t>(client_.rank()) + 1);
  auto availability =
      MakeAvailability(o_.availability, o_.seed * 104729 + static_cast<uint64_t>(client_.rank()),
                       std::max(0, client_.rank() - o_.evaluators));
  if (!availability.ok()) return availability.status();
  availability_ = std::move(*availability);
  if (o_.deep_from >= 0) schedule_.emplace(o_.deep_from, o_.deep_period, o_.deep_rounds);
  auto dp = ParsePrivacy(o_.dp);
  if (!dp.ok()) return dp.status();
  dp_ = *dp;
  dp_rng_.seed(o_.seed * 65537 + static_cast<uint64_t>(client_.rank()) * 13 + 5);
  if (o_.virtual_clock) {
    virtual_.emplace(o_.link, TrainingFlopsPerSample(model_->arch()), o_.device_gflops,
                     o_.slowdown);
  }
  auto log = RunLog::Open(o_.run_dir, client_.rank(), client_.clock());
  if (!log.ok()) return log.status();
  log_.emplace(std::move(*log));
  start_ = Clock::now();
  return Status();
}

Status EdgeClient::PullGlobal() {
  return ForEachTensor(tensors_, [&](size_t t) {
    return client_.Pull(tensors_[t].name, global_[t].data(), tensors_[t].NumElements());
  });
}

void EdgeClient::Progress(int64_t round, const std::string& what) {
  std::printf("round %lld/%d  %.1f s%s  %s\n", static_cast<long long>(round), o_.rounds, Now(),
              virtual_ ? " (virtual)" : "", what.c_str());
  std::fflush(stdout);
}

Status EdgeClient::Evaluate(const std::atomic<bool>& stop) {
  int64_t next = o_.eval_every;
  std::optional<Client::Evaluation> measured;
  while (!stop.load()) {
    auto closed = client_.AwaitRoundsClosed(next, measured);
    if (!closed.ok()) return closed.status();
    if (Status s = PullGlobal(); !s.ok()) return s;
    auto loss =
        model_->LossAndGradients(global_, test_->x.data(), test_->y.data(), test_->size, grads_);
    if (!loss.ok()) return loss.status();
    auto accuracy = model_->Accuracy(global_, test_->x.data(), test_->y.data(), test_->size);
    if (!accuracy.ok()) return accuracy.status();
    rounds_done_ = closed->closed;
    client_.ReportMetrics({{"loss", *loss}, {"accuracy", *accuracy}});
    Record(rounds_done_, *loss, *accuracy, 0);
    if (client_.rank() == 0) {
      Progress(rounds_done_,
               fmt::format("test loss {:.4f}  test accuracy {:.4f}", *loss, *accuracy));
    }
    measured = Client::Evaluation{.round = closed->closed, .loss = *loss, .accuracy = *accuracy};
    if (closed->finished) {  // the last measurement to the rounds log; answered at once
      auto last = client_.AwaitRoundsClosed(closed->closed, measured);
      return last.ok() ? Status() : last.status();
    }
    next = (closed->closed / o_.eval_every + 1) * o_.eval_every;
  }
  return Status::Aborted("interrupted");
}

Status EdgeClient::WaitOnline(const std::atomic<bool>& stop) {
  const double now = Now();
  const double back = availability_->NextOnline(now);
  if (back <= now) return Status();
  spdlog::info("client {} is offline until {:.1f} s", client_.rank(), back);
  if (virtual_) {  // it checks in when it is back, in virtual time
    client_.SetVirtualTime(back);
    return Status();
  }
  while (!stop.load() && Seconds() < back) {
    std::this_thread::sleep_for(std::chrono::milliseconds(
        std::clamp<int64_t>(static_cast<int64_t>((back - Seconds()) * 1000), 1, 100)));
  }
  return Status();
}

void EdgeClient::VirtualDownload(int64_t pulled_before) {
  const int64_t bytes = client_.stats().bytes_pulled - pulled_before;
  client_.SetVirtualTime(virtual_->Download(client_.virtual_time(), bytes));
}

void EdgeClient::VirtualTraining() {
  const int64_t samples = shard_.size * o_.local.epochs;
  client_.SetVirtualTime(virtual_->Compute(client_.virtual_time(), samples));
}

void EdgeClient::VirtualUpload(int64_t pushed_before) {
  const int64_t bytes = client_.stats().bytes_pushed - pushed_before;
  client_.SetVirtualTime(virtual_->Upload(client_.virtual_time(), bytes));
}

Status EdgeClient::PushDelta(const std::function<bool(size_t)>& sends) {
  // Under --dp a client's weight would carry its data size into the sum: every update counts 1.
  const double weight = dp_.on() ? 1.0 : static_cast<double>(shard_.size);
  const bool masked = secure_ && secure_->ready();
  std::vector<std::vector<uint32_t>> words(masked ? tensors_.size() : 0);
  std::vector<Ticket> pushes;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (!sends(t)) continue;
    const float* update = local_[t].data();
    if (masked) {  // the words travel as the push's 4-byte elements, never read as floats
      words[t] = MaskedTensor(t);
      update = reinterpret_cast<const float*>(words[t].data());
    }
    pushes.push_back(client_.Push(tensors_[t].name, update, tensors_[t].NumElements(), weight));
  }
  for (const Ticket& ticket : pushes) {
    if (Status s = ticket.Wait(); !s.ok()) return s;
  }
  return Status();
}

// The client's own fixed schedule (--deep_from): the layers it sends this round. Else the
// scheduler's layer-wise schedule: a layer is sent every P of this client's rounds with the
// deltas of the rounds between added in (hetps/layer_accumulator.h).
std::function<bool(size_t)> EdgeClient::LayersToSend() {
  if (schedule_) {
    return [this](size_t t) { return schedule_->Uploads(tensors_[t].layer, client_.clock()); };
  }
  layers_->BeginStep(client_.layer_schedule());
  std::vector<bool> send(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    layers_->Measure(t, local_[t].data(), global_[t].data());
    send[t] = layers_->Offer(t, local_[t].data());
  }
  layers_->Report(client_);
  return [send = std::move(send)](size_t t) { return send[t]; };
}

Status EdgeClient::SetupSecure() {
  proto::SecAgg task;
  if (!task.ParseFromString(client_.round_secagg())) {
    return Status::Malformed("the scheduler's secure round parameters do not parse");
  }
  if (!secure_) {
    secure_.emplace(client_.id(), [this](const proto::SecAgg& request) -> StatusOr<proto::SecAgg> {
      auto answer = client_.ExchangeSecAgg(request.SerializeAsString());
      if (!answer.ok()) return answer.status();
      proto::SecAgg a;
      if (!a.ParseFromString(*answer))
        return Status::Malformed("a SECAGG answer that does not parse");
      return a;
    });
  }
  ++secure_rounds_;
  secure_kept_ = task.kept();
  return secure_->Setup(task, dp_.on() ? 1.0 : static_cast<double>(shard_.size));
}

std::vector<uint32_t> EdgeClient::MaskedTensor(size_t t) const {
  const int32_t id = client_.shard_map().TensorId(tensors_[t].name);
  std::vector<uint32_t> words(local_[t].size());
  secure_->Mask(id, 0, local_[t].data(), static_cast<int64_t>(words.size()), words.data());
  return words;
}

void EdgeClient::UnmaskSecure(bool kept) {
  proto::SecAgg request;
  if (!client_.round_secagg().empty() && request.ParseFromString(client_.round_secagg()) &&
      request.phase() == proto::SecAgg::UNMASK) {
    if (Status s = secure_->Unmask(request, kept); !s.ok()) {
      spdlog::warn("client {}: round {} not unmasked here: {}", client_.rank(), client_.clock(),
                   s.message());
    }
  }
  secure_->Reset();
}

Status EdgeClient::Abandon(const char* why) {
  const size_t sent = std::max<size_t>(1, tensors_.size() / 2);
  if (Status s = PushDelta([&](size_t t) { return t < sent; }); !s.ok()) return s;
  ++abandoned_;
  spdlog::info("client {} {} in round {}: {} of {} tensors uploaded, the upload not reported",
               client_.rank(), why, client_.clock(), sent, tensors_.size());
  return Status();
}

// The upload, written over the local model: local_ = global_ - local_, clipped and noised as
// --dp says, then whatever a Byzantine client's attack makes of it.
void EdgeClient::MakeDelta() {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    float* d = local_[t].data();
    const float* g = global_[t].data();
    for (size_t i = 0; i < local_[t].size(); ++i) d[i] = g[i] - d[i];
  }
  Privatize();
  if (attack_) attack_->PoisonUpdate(local_, attack_rng_);
}

// --dp on the upload (docs/robust.md): clipped to the round's clip, noised as the mode says
// (distributed: a share, K of them making the central amount), and adaptive clipping's report
// of its norm: the bit in the clear (central), centred and noised by this client (local), or
// that under the secure round's masks (distributed).
void EdgeClient::Privatize() {
  clip_bit_ = {};
  if (!dp_.on()) return;
  const double clip = client_.round_clip() > 0 ? client_.round_clip() : dp_.clip;
  const double norm = ClipUpdate(local_, clip);
  const double z = client_.round_update_noise() > 0 ? client_.round_update_noise() : dp_.noise;
  const double share = dp_.mode == Privacy::Mode::kDistributed
                           ? 1 / std::sqrt(static_cast<double>(std::max(1, secure_kept_)))
                           : 1.0;
  if (dp_.mode != Privacy::Mode::kCentral) AddGaussianNoise(local_, z * clip * share, dp_rng_);
  if (!dp_.adaptive()) return;
  const bool within = norm <= clip;
  if (dp_.mode == Privacy::Mode::kCentral) {
    clip_bit_.within = within;
    return;
  }
  std::normal_distribution<double> noise(0.0, client_.round_count_noise() * share);
  const double bit = (within ? 0.5 : -0.5) + noise(dp_rng_);
  if (dp_.mode == Privacy::Mode::kLocal) {
    clip_bit_.noisy = bit;
  } else if (secure_ && secure_->ready()) {
    clip_bit_.masked =
        secure_->MaskCount(bit, secagg::CountFixedPoint(client_.round_count_noise(), secure_kept_));
  }
}

Status EdgeClient::Round(bool federated, bool& abandoned) {
  abandoned = false;
  const bool secure = federated && !client_.round_secagg().empty();
  if (dp_.mode == Privacy::Mode::kDistributed && !secure) {
    return Status::FailedPrecondition(
        "--dp=distributed adds only a share of the noise: it needs the scheduler's "
        "--secure_aggregation (this round is not secure)");
  }
  if (secure) {
    if (Status s = SetupSecure(); !s.ok()) {  // a dropout: the round goes on without it
      spdlog::warn("client {}: secure round {} without this client: {}", client_.rank(),
                   client_.clock(), s.message());
      if (secure_) secure_->Reset();
      auto kept = client_.FinishRound();
      ++participated_;
      abandoned = true;
      return kept.ok() ? Status() : kept.status();
    }
  }
  client_.BeginIteration();
  const ClientStats before = client_.stats();
  if (Status s = PullGlobal(); !s.ok()) return s;
  if (virtual_) {  // when its training ends is known now: the scheduler may go on meanwhile
    VirtualDownload(before.bytes_pulled);
    VirtualTraining();
    if (Status s = client_.DeclareVirtualTime(client_.virtual_time()); !s.ok()) return s;
  }
  const auto train_start = Clock::now();
  for (size_t t = 0; t < tensors_.size(); ++t) local_[t] = global_[t];
  auto loss = TrainLocally(*model_, shard_, o_.local, global_, local_, grads_, rng_);
  if (!loss.ok()) return loss.status();
  loss_ = *loss;
  if (!virtual_ && o_.slowdown > 1.0) {
    std::this_thread::sleep_for((Clock::now() - train_start) * (o_.slowdown - 1.0));
  }
  train_s_ += std::chrono::duration<double>(Clock::now() - train_start).count();
  MakeDelta();
  if (federated) {
    std::bernoulli_distribution fails(o_.fail_fraction);
    const bool failed = fails(fail_rng_);
    const bool away = !availability_->OnlineThroughout(selected_s_, Now());
    if (failed || away) {
      abandoned = true;
      ++participated_;
      const int64_t pushed = client_.stats().bytes_pushed;
      Status s = Abandon(failed ? "fails" : "went offline");
      if (virtual_) VirtualUpload(pushed);
      return s;
    }
  }
  const int64_t pushed = client_.stats().bytes_pushed;
  // A secure upload is masked as a whole: every layer goes, whatever the layer schedule says.
  if (Status s = PushDelta(secure ? [](size_t) { return true; } : LayersToSend()); !s.ok()) {
    return s;
  }
  if (virtual_) VirtualUpload(pushed);
  if (!federated) {
    if (Status s = client_.Clock(); !s.ok()) return s;
    rounds_done_ = client_.clock();
    return Status();
  }
  auto kept = client_.FinishRound(clip_bit_);
  if (!kept.ok()) return kept.status();
  if (secure) UnmaskSecure(*kept);
  if (*kept) ++kept_;
  rounds_done_ = client_.clock() + 1;
  ++participated_;
  return Status();
}

Status EdgeClient::Observe() {
  const int64_t round = rounds_done_;
  std::optional<double> accuracy;
  if (test_ && (round % o_.eval_every == 0 || round >= o_.rounds)) {
    // The model this round started from: the global model after round - 1 aggregations.
    auto a = model_->Accuracy(global_, test_->x.data(), test_->y.data(), test_->size);
    if (!a.ok()) return a.status();
    accuracy = *a;
  }
  if (accuracy) {
    client_.ReportMetrics({{"loss", loss_}, {"accuracy", *accuracy}});
  } else {
    client_.ReportMetrics({{"loss", loss_}});
  }
  Record(round, loss_, accuracy, client_.stats().max_staleness);
  if (client_.rank() == 0) {
    const std::string acc =
        accuracy ? fmt::format("  test accuracy {:.4f} (model of round {})", *accuracy, round - 1)
                 : "";
    Progress(round, fmt::format("local loss {:.4f}{}", loss_, acc));
  }
  return Status();
}

Status EdgeClient::Finish() {
  const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  const ClientStats stats = client_.stats();
  if (evaluator()) {
    spdlog::info("evaluator {}: {} rounds evaluated in {:.1f} s", client_.rank(), rounds_done_,
                 secs);
  } else {
    spdlog::info(
        "client {}: {} rounds{} on {} samples, {:.1f} s training of {:.1f} s, {} bytes up, "
        "{:.2f} s CPU",
        client_.rank(), participated_ > 0 ? participated_ : rounds_done_,
        participated_ > 0 ? fmt::format(" ({} kept, {} abandoned)", kept_, abandoned_) : "",
        shard_.size, train_s_, secs, stats.bytes_pushed, ProcessCpuSeconds());
  }
  if (secure_rounds_ > 0) {  // what secure aggregation cost: docs/secure-aggregation.md
    spdlog::info(
        "client {}: secure aggregation in {} rounds: {} bytes with the scheduler, {:.3f} s CPU",
        client_.rank(), secure_rounds_, secure_->bytes(), secure_->cpu_s());
  }
  log_->Close();  // before the barrier: rank 0 merges every client's file after it
  if (Status s = client_.Barrier(); !s.ok()) return s;
  if (client_.rank() != 0) return Status();
  if (Status s = PullGlobal(); !s.ok()) return s;
  auto evaluated = model_->Accuracy(global_, test_->x.data(), test_->y.data(), test_->size);
  if (!evaluated.ok()) return evaluated.status();
  std::printf("final test accuracy %.4f after %d rounds of %d clients in %.1f s\n", *evaluated,
              o_.rounds, Clients(), secs);
  if (!o_.run_dir.empty()) {
    RunSummary summary;
    summary.accuracy = *evaluated;
    summary.wall_s = secs;
    summary.iterations = o_.rounds;
    summary.workers = client_.num_workers();
    summary.consistency = client_.consistency();
    if (Status s = FinishRun(o_.run_dir, summary); !s.ok()) return s;
    if (Status s = WriteModel(o_.run_dir + "/model.bin", global_); !s.ok()) return s;
    std::printf("run files in %s: metrics.csv, plot.png, summary.json, model.bin\n",
                o_.run_dir.c_str());
  }
  std::fflush(stdout);
  return Status();
}

}  // namespace

Status RunEdgeClient(Client& client, const EdgeOptions& o, const std::atomic<bool>& stop) {
  if (Status s = ValidateEdgeOptions(o); !s.ok()) return s;
  EdgeClient edge(client, o);
  if (Status s = edge.Prepare(); !s.ok()) return s;
  // Servers running selected or committed: the scheduler hands out rounds (or tasks) and says when
  // the run's rounds are done; otherwise every client takes part in every round.
  const bool federated = client.scheduler_runs_rounds();
  if ((o.evaluators > 0 || o.fail_fraction > 0 || o.availability != "always") && !federated) {
    return Status::InvalidArgument(
        "evaluators, fail_fraction and availability need federated rounds (servers running "
        "--consistency=selected)");
  }
  if (client.rank() < o.evaluators) {
    if (Status s = edge.Evaluate(stop); !s.ok()) return s;
    return edge.Finish();
  }
  while (!stop.load()) {
    if (federated) {
      if (Status s = edge.WaitOnline(stop); !s.ok()) return s;
      if (stop.load()) break;
      auto round = client.AwaitRound();
      if (!round.ok()) return round.status();
      if (*round < 0) break;
      edge.Selected();
    } else if (client.clock() >= o.rounds) {
      break;
    }
    bool abandoned = false;
    if (Status s = edge.Round(federated, abandoned); !s.ok()) return s;
    if (abandoned) continue;
    if (Status s = edge.Observe(); !s.ok()) return s;
  }
  if (stop.load()) return Status::Aborted("interrupted");
  return edge.Finish();
}

}  // namespace hetps
