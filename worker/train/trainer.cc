#include "worker/train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "worker/edge/virtual_round.h"
#include "worker/train/gradient_encoders.h"
#include "worker/train/model.h"
#include "worker/train/partitioner.h"
#include "worker/train/run_log.h"
#include "worker/train/shared_images.h"
#include "worker/train/straggler.h"
#include "worker/train/tensor_requests.h"
#include "worker/train/virtual_steps.h"

namespace hetps {
namespace {

using Clock = std::chrono::steady_clock;

// Every tensor in one call: the small ones (biases) share messages with each other.
Status PullModel(Client& client, const std::vector<TensorSpec>& tensors, Params& params) {
  std::vector<Client::TensorView> into;
  for (size_t t = 0; t < tensors.size(); ++t) {
    into.push_back({tensors[t].name, params[t].data(), tensors[t].NumElements()});
  }
  return client.Pull(into).Wait();
}

// Minibatches drawn in a per-epoch shuffled order of this worker's samples.
class Batches {
 public:
  Batches(std::vector<int64_t> samples, uint64_t seed) : samples_(std::move(samples)), rng_(seed) {
    std::shuffle(samples_.begin(), samples_.end(), rng_);
  }
  // Copies the next `batch` samples' features and labels.
  void Next(const Dataset& d, int batch, std::vector<float>& x, std::vector<int32_t>& y) {
    x.resize(static_cast<size_t>(batch) * d.features);
    y.resize(batch);
    for (int i = 0; i < batch; ++i) {
      if (next_ == samples_.size()) {
        std::shuffle(samples_.begin(), samples_.end(), rng_);
        next_ = 0;
        ++epoch_;
      }
      const int64_t s = samples_[next_++];
      std::copy_n(d.x.begin() + s * d.features, d.features, x.begin() + i * d.features);
      y[i] = d.y[s];
    }
  }
  // Draws `n` samples without copying them: the order and rng state after Skip(k * batch) are
  // those after k calls of Next (a resumed run continues the same sequence).
  void Skip(int64_t n) {
    while (n > 0) {
      if (next_ == samples_.size()) {
        std::shuffle(samples_.begin(), samples_.end(), rng_);
        next_ = 0;
        ++epoch_;
      }
      const int64_t take = std::min<int64_t>(n, samples_.size() - next_);
      next_ += take;
      n -= take;
    }
  }
  double epoch() const { return epoch_ + static_cast<double>(next_) / samples_.size(); }

 private:
  std::vector<int64_t> samples_;
  std::mt19937_64 rng_;
  size_t next_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace

Status ValidateTrainOptions(const TrainOptions& o) {
  if (o.batch < 1 || o.iterations < 1 || o.eval_every < 1 || !(o.slowdown >= 1.0)) {
    return Status::InvalidArgument("batch, iterations, eval_every must be >= 1 and slowdown >= 1");
  }
  if (auto s = Stragglers().Parse(o.straggler); !s.ok()) return s.status();
  if (o.validation < 0) return Status::InvalidArgument("validation must be >= 0 samples");
  if (o.model == "ctr") {
    if (o.validation > 0 || o.device == "cuda") {
      return Status::InvalidArgument(
          "--model=ctr streams its data (no --validation split) and computes on the cpu");
    }
    return ValidateCtrOptions(o.ctr);
  }
  if (o.partition != "iid" && o.partition != "dirichlet") {
    return Status::InvalidArgument(
        fmt::format("unknown partition '{}' (iid, dirichlet)", o.partition));
  }
  if (o.virtual_clock && o.device == "cuda") {
    return Status::InvalidArgument(
        "--clock=virtual models the device's speed (--device_gflops): train on the cpu");
  }
  if (o.virtual_clock && !(o.device_gflops > 0)) {
    return Status::InvalidArgument("--device_gflops must be > 0");
  }
  return Status();
}

namespace {

// One worker's training run, in the order it happens: Prepare, then Step and Observe per
// iteration, then Finish.
class Trainer {
 public:
  Trainer(Client& client, const TrainOptions& options) : client_(client), o_(options) {}
  ~Trainer() {
    if (device_) device_->Unpin();
  }

  // Loads the data and this worker's share of it, builds the model, declares its tensors and
  // offers the initial values.
  Status Prepare();
  // One iteration: pull, compute, push (the previous push stays in flight), clock.
  Status Step(int it);
  // Step in virtual time: the pull's turn, the compute, the turn of the pushes and the clock
  // (worker/train/virtual_steps.h). Pushes are answered within their turn.
  Status VirtualStep();
  // After a step: evaluation (rank 0), reported figures and the progress line.
  Status Observe(int it);
  // Waits for the last pushes, meets the other workers, and rank 0 evaluates the final model
  // and writes the run's summary.
  Status Finish();

 private:
  Status LoadData();
  // Finish's parts: this worker's traffic (printed, and its file for the run's summary); rank
  // 0's deferred evaluations, each logged at the time its copy was taken; the run's summary.
  Status ReportTraffic();
  Status EvaluateSnapshots();
  RunSummary Summary(double accuracy, double wall) const;

  // The data shard this worker trains on: one per worker the cluster formed with; a worker
  // that joined beyond them shares shard rank mod num_workers.
  int Shard() const { return client_.rank() % client_.num_workers(); }
  // Device-resident: pulls every tensor and uploads each to the device as its pull completes.
  Status PullAndUpload();
  // Pushes the step's gradients `g` (host) or the device's, each layer when the layer-wise
  // schedule says, accumulated in between (hetps/layer_accumulator.h); encoded on this thread
  // (by the client from host memory, or on the device).
  Status PushGradients(Params& g);
  double Since(Clock::time_point& mark) {
    const auto now = Clock::now();
    const double s = std::chrono::duration<double>(now - mark).count();
    mark = now;
    return s;
  }

  Client& client_;
  const TrainOptions& o_;
  std::optional<Dataset> train_, eval_;  // eval: rank 0 only, the test set or the validation
  std::string eval_set_ = "test";        // which of the two eval_ holds
  std::unique_ptr<Model> model_;
  // The model's device, when it trains there; its gradients are encoded there by encoders_.
  DeviceTraining* device_ = nullptr;
  std::unique_ptr<GradientEncoders> encoders_;
  std::vector<TensorSpec> tensors_;
  std::optional<LayerAccumulator> layers_;  // the layer-wise schedule
  Params params_;
  Params grads_[2];  // one in flight while the next is computed
  std::vector<Ticket> in_flight_;
  std::optional<RunLog> log_;
  std::optional<Batches> batches_;
  std::unique_ptr<Straggler> straggler_;  // o_.straggler, seeded by (seed, rank)
  std::optional<VirtualSteps> virtual_;   // o_.virtual_clock
  // The time rows are stamped with: virtual seconds under virtual time, else the host's.
  double Stamp() const { return virtual_ ? virtual_->now() : RunLog::Now(); }
  std::vector<float> x_;
  std::vector<int32_t> y_;
  Clock::time_point start_;
  double loss_ewma_ = -1;
  // Deferred evaluation (TrainOptions::eval_deferred): the model as pulled at an evaluation
  // clock, with what its row records.
  struct Snapshot {
    double unix_seconds;
    int64_t clock;
    double loss;
    int64_t staleness;
    Params params;
  };
  std::vector<Snapshot> snapshots_;
  int64_t snapshot_bytes_ = 0;
  StepSeconds seconds_;  // summed over this worker's steps
  int64_t steps_ = 0;
};

// The pixels come from the machine's shared cache (worker/train/shared_images.h); this worker
// keeps only its shard as floats, in the split's order, so its batches are those it would
// draw from the whole set.
Status Trainer::LoadData() {
  auto train = OpenTrainSet(o_);
  if (!train.ok()) return train.status();
  // The training pool: every sample, less a held-out validation split (a seeded draw of its
  // own, so the workers' split of the rest is still seeded by o_.seed alone).
  std::vector<int64_t> pool(train->size());
  std::iota(pool.begin(), pool.end(), 0);
  if (o_.validation > 0) {
    if (o_.validation > train->size() - client_.num_workers()) {
      return Status::InvalidArgument(
          fmt::format("--validation={} leaves fewer training samples than workers (the set has {})",
                      o_.validation, train->size()));
    }
    HeldOut split = HoldOut(train->size(), o_.validation, o_.seed);
    pool = std::move(split.rest);
    if (client_.rank() == 0) {
      eval_ = train->Gather(split.held);
      eval_set_ = "validation";
    }
  } else if (client_.rank() == 0) {
    auto test = LoadTestSet(o_);
    if (!test.ok()) return test.status();
    eval_ = std::move(*test);
  }
  // The split is of positions in the pool; they become sample indices below.
  std::vector<int32_t> pool_labels;
  pool_labels.reserve(pool.size());
  for (int64_t i : pool) pool_labels.push_back(train->labels()[i]);
  std::vector<std::vector<int64_t>> parts =
      SplitSamples(o_, pool_labels, train->classes(), client_.num_workers());
  for (auto& part : parts) {
    for (int64_t& i : part) i = pool[i];
  }
  const auto histogram = LabelHistogram({parts[Shard()]}, train->labels(), train->classes());
  train_ = train->Gather(parts[Shard()]);
  spdlog::info("rank {} trains on {} samples, labels [{}]{}", client_.rank(), train_->size,
               fmt::join(histogram[0], " "),
               Shard() == client_.rank() ? "" : fmt::format(" (shard {})", Shard()));
  return Status();
}

Status Trainer::Prepare() {
  auto straggler = MakeStraggler(o_.straggler, o_.seed, client_.rank());
  if (!straggler.ok()) return straggler.status();
  straggler_ = std::move(*straggler);
  if (Status s = LoadData(); !s.ok()) return s;
  auto made = MakeWorkloadModel(o_, client_.rank(), train_->rows, train_->cols, train_->classes);
  if (!made.ok()) return made.status();
  model_ = std::move(*made);
  tensors_ = model_->Tensors();
  client_.SetDevice(model_->device());
  if (Status s = DeclareAndInit(client_, *model_, o_.seed, params_); !s.ok()) return s;
  device_ = model_->device_training();
  if (device_) {
    if (Status s = device_->Pin(params_); !s.ok()) return s;
    auto encoders = MakeDeviceEncoders();
    if (!encoders.ok()) return encoders.status();
    encoders_ = std::move(*encoders);
  }
  std::vector<LayerAccumulator::Tensor> shapes;
  for (const TensorSpec& t : tensors_) shapes.push_back({t.layer, t.NumElements()});
  layers_.emplace(std::move(shapes));
  grads_[0] = model_->Zeros();
  grads_[1] = model_->Zeros();
  auto log = RunLog::Open(o_.run_dir, client_.rank(), client_.clock());
  if (!log.ok()) return log.status();
  log_.emplace(std::move(*log));
  std::vector<int64_t> samples(train_->size);
  std::iota(samples.begin(), samples.end(), 0);
  batches_.emplace(std::move(samples), o_.seed * 1000003 + client_.rank());
  // Started past clock 0 (resumed, or joined a running cluster): continue the data order.
  batches_->Skip(client_.clock() * o_.batch);
  if (o_.virtual_clock) {
    const double flops = TrainingFlopsPerSample(model_->arch());
    virtual_.emplace(client_, o_.link, flops, o_.device_gflops);
    spdlog::info(
        "rank {} runs in virtual time: a step computes {:.17g} virtual s ({} samples x {:.0f} "
        "FLOPs / {} GFLOP/s x slowdown {}{})",
        client_.rank(), virtual_->ComputeSeconds(o_.batch, o_.slowdown), o_.batch, flops,
        o_.device_gflops, o_.slowdown,
        o_.straggler == "none" ? "" : " x the straggler factor of each clock");
  }
  start_ = Clock::now();
  return Status();
}

Status Trainer::PullAndUpload() {
  std::vector<Ticket> pulls;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    pulls.push_back(client_.Pull(tensors_[t].name, params_[t].data(), tensors_[t].NumElements()));
  }
  Status first;
  for (size_t t = 0; t < pulls.size(); ++t) {  // every ticket is waited for: they write params_
    Status s = pulls[t].Wait();
    if (s.ok() && first.ok()) s = device_->Upload(t, params_[t].data());
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status Trainer::PushGradients(Params& g) {
  const LayerPeriods schedule = client_.layer_schedule();
  layers_->BeginStep(schedule);
  // Pushes of one call carry one weight: tensors are grouped by the steps they carry.
  std::map<int64_t, std::vector<Client::ConstTensorView>> by_steps;
  const bool measure = steps_ % 10 == 0;  // the adaptive schedule's figures, every 10th step
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const int64_t n = tensors_[t].NumElements();
    const int64_t steps = layers_->Steps(t);
    const bool due = layers_->Due(t);
    if (device_) {
      if (measure) {
        auto norms = device_->Norms(t);
        if (!norms.ok()) return norms.status();
        layers_->MeasureNorms(t, norms->first, norms->second);
      }
      const bool mean = schedule.mean && steps > 1;
      if (Status s = device_->Accumulate(t, due, mean ? 1.0f / steps : 1.0f); !s.ok()) return s;
      layers_->Skip(t);
      if (due) {
        in_flight_.push_back(client_.PushEncoded(tensors_[t].name, n,
                                                 encoders_->For(device_->Gradient(t)),
                                                 static_cast<double>(o_.batch) * steps));
      }
      continue;
    }
    if (measure) layers_->Measure(t, g[t].data(), params_[t].data());
    if (layers_->Offer(t, g[t].data()))
      by_steps[steps].push_back({tensors_[t].name, g[t].data(), n});
  }
  for (auto& [steps, grads] : by_steps) {
    in_flight_.push_back(client_.Push(grads, static_cast<double>(o_.batch) * steps));
  }
  layers_->Report(client_);
  return Status();
}

Status Trainer::VirtualStep() {
  const double compute =
      virtual_->ComputeSeconds(o_.batch, o_.slowdown * straggler_->FactorAt(client_.clock()));
  Status pulled = virtual_->Turn(
      [&]() -> StatusOr<std::vector<Ticket>> {
        std::vector<Client::TensorView> into;
        for (size_t t = 0; t < tensors_.size(); ++t) {
          into.push_back({tensors_[t].name, params_[t].data(), tensors_[t].NumElements()});
        }
        return std::vector<Ticket>{client_.Pull(into)};
      },
      compute);
  if (!pulled.ok()) return pulled;
  Params& g = grads_[0];
  batches_->Next(*train_, o_.batch, x_, y_);
  auto computed = model_->LossAndGradients(params_, x_.data(), y_.data(), o_.batch, g);
  if (!computed.ok()) return computed.status();
  loss_ewma_ = loss_ewma_ < 0 ? *computed : 0.95 * loss_ewma_ + 0.05 * *computed;
  client_.SetLoss(*computed);
  virtual_->Advance(compute);
  ++steps_;
  return virtual_->Turn(
      [&]() -> StatusOr<std::vector<Ticket>> {
        if (Status s = PushGradients(g); !s.ok()) return s;
        std::vector<Ticket> turn = std::move(in_flight_);
        in_flight_.clear();
        turn.push_back(client_.ClockAsync());
        return turn;
      },
      0);
}

Status Trainer::Step(int it) {
  if (virtual_) return VirtualStep();
  client_.BeginIteration();  // evaluation in Observe is not iteration time
  auto mark = Clock::now();
  if (Status s = device_ ? PullAndUpload() : PullModel(client_, tensors_, params_); !s.ok()) {
    return s;
  }
  seconds_.pull += Since(mark);
  Params& g = grads_[it % 2];
  // The previous step's pushes stay in flight while this one computes. On the host their
  // buffer is the one reused next (two pushes back); device pushes own their bytes, so they
  // are waited for only before the next pushes.
  auto wait_pushes = [&]() -> Status {
    for (const Ticket& t : in_flight_) {
      if (Status s = t.Wait(); !s.ok()) return s;
    }
    in_flight_.clear();
    seconds_.push_wait += Since(mark);
    return Status();
  };
  if (!device_) {
    if (Status s = wait_pushes(); !s.ok()) return s;
  }
  const auto compute_start = mark;
  batches_->Next(*train_, o_.batch, x_, y_);
  auto computed = device_ ? device_->Step(x_.data(), y_.data(), o_.batch)
                          : model_->LossAndGradients(params_, x_.data(), y_.data(), o_.batch, g);
  if (!computed.ok()) return computed.status();
  loss_ewma_ = loss_ewma_ < 0 ? *computed : 0.95 * loss_ewma_ + 0.05 * *computed;
  client_.SetLoss(*computed);  // travels with this step's pushes
  // A straggler sleeps, leaving the CPU to the others (worker/train/straggler.h).
  const double slowdown = o_.slowdown * straggler_->FactorAt(client_.clock());
  if (slowdown > 1.0) {
    std::this_thread::sleep_for((Clock::now() - compute_start) * (slowdown - 1.0));
  }
  seconds_.compute += Since(mark);
  if (device_) {
    if (Status s = wait_pushes(); !s.ok()) return s;
  }
  if (Status s = PushGradients(g); !s.ok()) return s;
  seconds_.encode += Since(mark);
  Status clocked = client_.Clock();
  seconds_.clock += Since(mark);
  ++steps_;
  return clocked;
}

Status Trainer::Observe(int it) {
  const int64_t clock = client_.clock();
  const bool eval = eval_ && (clock % o_.eval_every == 0 || clock >= o_.iterations);
  // Deferred: the copy's row is written when it is evaluated (Finish).
  bool deferred = false;
  if (eval && o_.eval_deferred) {
    int64_t bytes = 0;
    for (const auto& p : params_) bytes += static_cast<int64_t>(p.size() * sizeof(float));
    if (snapshot_bytes_ + bytes <= kDeferredEvalBytes) {
      snapshot_bytes_ += bytes;
      snapshots_.push_back({Stamp(), clock, loss_ewma_, client_.stats().max_staleness, params_});
      deferred = true;
    } else if (snapshot_bytes_ <= kDeferredEvalBytes) {
      snapshot_bytes_ = kDeferredEvalBytes + 1;  // warn once
      spdlog::warn("deferred evaluation holds {} MiB of model copies; evaluating the rest live",
                   kDeferredEvalBytes >> 20);
    }
  }
  std::optional<double> accuracy;
  if (eval && !deferred) {
    auto a = model_->Accuracy(params_, eval_->x.data(), eval_->y.data(), eval_->size);
    if (!a.ok()) return a.status();
    accuracy = *a;
  }
  if (clock % o_.log_every == 0 || eval) {
    if (accuracy && eval_set_ == "test") {  // the cluster's "accuracy" is a test accuracy
      client_.ReportMetrics({{"loss", loss_ewma_}, {"accuracy", *accuracy}});
    } else {
      client_.ReportMetrics({{"loss", loss_ewma_}});
    }
    if (!deferred) {
      log_->RecordAt(Stamp(), clock, client_.rank(), loss_ewma_, accuracy,
                     client_.stats().max_staleness);
    }
  }
  if (clock % o_.progress_every == 0 || (eval && !deferred)) {
    const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    const std::string acc =
        accuracy ? fmt::format("  {} accuracy {:.4f}", eval_set_, *accuracy) : "";
    std::printf("epoch %.2f  iter %lld/%d  %.1f it/s  loss %.4f%s  staleness max %lld\n",
                batches_->epoch(), static_cast<long long>(clock), o_.iterations, (it + 1) / secs,
                loss_ewma_, acc.c_str(), static_cast<long long>(client_.stats().max_staleness));
    std::fflush(stdout);
  }
  return Status();
}

Status Trainer::Finish() {
  for (const Ticket& t : in_flight_) {
    if (Status s = t.Wait(); !s.ok()) return s;
  }
  if (virtual_) {
    if (Status s = virtual_->Finish(); !s.ok()) return s;
  }
  if (Status s = ReportTraffic(); !s.ok()) return s;
  // Every worker's file is closed before the barrier: rank 0 merges them after it. Rank 0's own
  // stays open for its deferred evaluations, done after the barrier so that they never hold up
  // the run's end.
  if (snapshots_.empty()) log_->Close();
  if (Status s = client_.Barrier(); !s.ok()) return s;
  // Until every worker finished: under asp a straggler ends long after rank 0.
  const double wall = std::chrono::duration<double>(Clock::now() - start_).count();
  if (Status s = EvaluateSnapshots(); !s.ok()) return s;
  log_->Close();
  if (!eval_) return Status();
  if (Status s = PullModel(client_, tensors_, params_); !s.ok()) return s;
  auto evaluated = model_->Accuracy(params_, eval_->x.data(), eval_->y.data(), eval_->size);
  if (!evaluated.ok()) return evaluated.status();
  std::printf("final %s accuracy %.4f after %d iterations per worker in %.1f s\n",
              eval_set_.c_str(), *evaluated, o_.iterations, wall);
  if (!o_.run_dir.empty()) {
    if (Status s = FinishRun(o_.run_dir, Summary(*evaluated, wall)); !s.ok()) return s;
    std::printf("run files in %s: metrics.csv, plot.png, summary.json\n", o_.run_dir.c_str());
  }
  std::fflush(stdout);
  return Status();
}

Status Trainer::ReportTraffic() {
  const ClientStats stats = client_.stats();
  std::printf(
      "rank %d pushed %lld bytes (%lld as float32: %.1fx less)\n", client_.rank(),
      static_cast<long long>(stats.bytes_pushed), static_cast<long long>(stats.raw_bytes_pushed),
      stats.bytes_pushed ? static_cast<double>(stats.raw_bytes_pushed) / stats.bytes_pushed : 0.0);
  if (device_) {
    std::printf("rank %d computed on %s and encoded %lld partitions there\n", client_.rank(),
                model_->device().c_str(), static_cast<long long>(encoders_->device_partitions()));
  }
  std::fflush(stdout);
  return WriteWorkerTraffic(o_.run_dir, client_.rank(),
                            {.partition_pushes = stats.pushes,
                             .bytes_pushed = stats.bytes_pushed,
                             .bytes_pulled = stats.bytes_pulled,
                             .dropped_pushes = stats.dropped_pushes,
                             .push_staleness_sum = stats.push_staleness_sum,
                             .max_push_staleness = stats.max_push_staleness});
}

Status Trainer::EvaluateSnapshots() {
  double last_accuracy = 0;
  for (const Snapshot& s : snapshots_) {  // each row at the time its copy was taken
    auto a = model_->Accuracy(s.params, eval_->x.data(), eval_->y.data(), eval_->size);
    if (!a.ok()) return a.status();
    last_accuracy = *a;
    log_->RecordAt(s.unix_seconds, s.clock, client_.rank(), s.loss, *a, s.staleness);
  }
  if (!snapshots_.empty()) {
    std::printf(
        "rank %d evaluated %zu deferred model copies; the last (clock %lld): %s "
        "accuracy %.4f\n",
        client_.rank(), snapshots_.size(), static_cast<long long>(snapshots_.back().clock),
        eval_set_.c_str(), last_accuracy);
    snapshots_.clear();
  }
  return Status();
}

RunSummary Trainer::Summary(double accuracy, double wall) const {
  RunSummary summary;
  summary.accuracy = accuracy;
  summary.eval_set = eval_set_;
  summary.wall_s = virtual_ ? virtual_->now() : wall;
  summary.virtual_time = virtual_.has_value();
  summary.host_s = wall;
  summary.iterations = o_.iterations;
  summary.workers = client_.num_workers();
  summary.samples = static_cast<int64_t>(o_.iterations) * o_.batch * client_.num_workers();
  summary.consistency = client_.consistency();
  summary.device = model_->device();
  summary.device_encoded_partitions = encoders_ ? encoders_->device_partitions() : 0;
  summary.step = seconds_.Per(steps_);
  return summary;
}

}  // namespace

Status RunTraining(Client& client, const TrainOptions& o, const std::atomic<bool>& stop) {
  if (Status s = ValidateTrainOptions(o); !s.ok()) return s;
  if (o.model == "ctr") return RunCtrTraining(client, o, stop);
  Trainer trainer(client, o);
  if (Status s = trainer.Prepare(); !s.ok()) return s;
  for (int it = 0; client.clock() < o.iterations && !stop.load(); ++it) {
    if (Status s = trainer.Step(it); !s.ok()) return s;
    if (Status s = trainer.Observe(it); !s.ok()) return s;
  }
  if (stop.load()) return Status::Aborted("interrupted");
  return trainer.Finish();
}

}  // namespace hetps
