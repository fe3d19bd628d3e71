#include "worker/ctr/ctr_training.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <random>

#include "worker/ctr/ctr_data.h"
#include "worker/ctr/ctr_model.h"
#include "worker/train/run_log.h"
#include "worker/train/trainer.h"

namespace hetps {
namespace {

std::string Table(int field) { return fmt::format("C{}", field + 1); }

// One worker's run: Prepare, then Step and Observe per iteration, then Finish.
class CtrTrainer {
 public:
  CtrTrainer(Client& client, const TrainOptions& o)
      : client_(client),
        o_(o),
        data_(o.ctr.ids_per_field, o.ctr.zipf, o.seed),
        model_(kCtrFields, o.ctr.dim, kCtrDense, o.ctr.hidden),
        rng_(o.seed * 1000003 + 1 + static_cast<uint64_t>(client.rank())) {}

  Status Prepare();
  Status Step();
  Status Observe();
  Status Finish();

 private:
  // Pulls the rows of `batch`'s ids into rows_ (sample-major) and the dense layers.
  Status Pull(const CtrBatch& batch);
  // Rank 0: AUC and log-loss of the model as it is on the servers now.
  StatusOr<std::pair<double, double>> Evaluate();
  Status WriteSummary(double auc, double logloss, double wall) const;

  Client& client_;
  const TrainOptions& o_;
  CtrData data_;
  CtrModel model_;
  std::mt19937_64 rng_;
  CtrParams params_, grads_;
  std::vector<Ticket> pushes_;  // the previous step's (grads_ is in use until they are done)
  CtrBatch batch_, test_;
  double teacher_auc_ = 0;
  std::vector<uint64_t> keys_;  // one field's ids of a batch
  std::vector<float> rows_, field_rows_, row_grads_;
  std::optional<RunLog> log_;
  std::chrono::steady_clock::time_point start_;
  double loss_ewma_ = -1;
  int64_t steps_ = 0;
  StepSeconds seconds_;  // summed over this worker's steps
};

double Since(std::chrono::steady_clock::time_point& mark) {
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - mark).count();
  mark = now;
  return s;
}

Status CtrTrainer::Prepare() {
  for (int f = 0; f < kCtrFields; ++f) {
    TableOptions t;
    t.dim = o_.ctr.dim;
    t.init = "normal";
    t.init_scale = 0.01;
    t.optimizer = o_.ctr.table_optimizer;
    if (Status s = client_.DeclareTable(Table(f), t); !s.ok()) return s;
  }
  const std::vector<TensorSpec>& tensors = model_.Tensors();
  if (Status s = client_.DeclareTensors(tensors); !s.ok()) return s;
  params_ = model_.Init(o_.seed);
  for (size_t t = 0; t < tensors.size(); ++t) {
    Status s = client_.Init(tensors[t].name, params_[t].data(), tensors[t].NumElements()).Wait();
    if (!s.ok()) return s;
  }
  auto log = RunLog::Open(o_.run_dir, client_.rank());
  if (!log.ok()) return log.status();
  log_.emplace(std::move(*log));
  if (client_.rank() == 0) {
    std::mt19937_64 test_rng(o_.seed * 1000003);
    data_.Draw(test_rng, o_.ctr.test_samples, test_);
    teacher_auc_ = Auc(test_.labels, test_.teacher);
    double ctr = 0;
    for (float y : test_.labels) ctr += y;
    std::printf("test set: %d samples, CTR %.3f, teacher AUC %.4f, teacher log-loss %.4f\n",
                test_.n, ctr / test_.n, teacher_auc_, LogLoss(test_.labels, test_.teacher));
    std::fflush(stdout);
  }
  start_ = std::chrono::steady_clock::now();
  return Status();
}

Status CtrTrainer::Pull(const CtrBatch& batch) {
  const int n = batch.n, dim = o_.ctr.dim;
  field_rows_.resize(static_cast<size_t>(n) * kCtrFields * dim);
  keys_.resize(static_cast<size_t>(n) * kCtrFields);
  std::vector<Ticket> tickets;
  for (int f = 0; f < kCtrFields; ++f) {  // every field's pull in flight at once
    uint64_t* keys = &keys_[static_cast<size_t>(f) * n];
    for (int i = 0; i < n; ++i) keys[i] = batch.ids[static_cast<size_t>(i) * kCtrFields + f];
    tickets.push_back(
        client_.PullRows(Table(f), keys, n, &field_rows_[static_cast<size_t>(f) * n * dim]));
  }
  std::vector<Client::TensorView> into;
  const std::vector<TensorSpec>& tensors = model_.Tensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    into.push_back({tensors[t].name, params_[t].data(), tensors[t].NumElements()});
  }
  tickets.push_back(client_.Pull(into));
  for (Ticket& t : tickets) {
    if (Status s = t.Wait(); !s.ok()) return s;
  }
  rows_.resize(field_rows_.size());  // field-major -> sample-major
  for (int f = 0; f < kCtrFields; ++f) {
    for (int i = 0; i < n; ++i) {
      std::copy_n(&field_rows_[(static_cast<size_t>(f) * n + i) * dim], dim,
                  &rows_[(static_cast<size_t>(i) * kCtrFields + f) * dim]);
    }
  }
  return Status();
}

Status CtrTrainer::Step() {
  auto mark = std::chrono::steady_clock::now();
  data_.Draw(rng_, o_.batch, batch_);
  if (Status s = Pull(batch_); !s.ok()) return s;
  seconds_.pull += Since(mark);
  for (Ticket& t : pushes_) {  // overlapped with this step's pulls
    if (Status s = t.Wait(); !s.ok()) return s;
  }
  pushes_.clear();
  seconds_.push_wait += Since(mark);
  CtrParams& grads = grads_;
  const double loss = model_.Step(params_, rows_.data(), batch_.dense.data(), batch_.labels.data(),
                                  batch_.n, grads, row_grads_);
  loss_ewma_ = loss_ewma_ < 0 ? loss : 0.98 * loss_ewma_ + 0.02 * loss;
  seconds_.compute += Since(mark);
  const int n = batch_.n, dim = o_.ctr.dim;
  for (int f = 0; f < kCtrFields; ++f) {  // sample-major -> one field's rows
    for (int i = 0; i < n; ++i) {
      std::copy_n(&row_grads_[(static_cast<size_t>(i) * kCtrFields + f) * dim], dim,
                  &field_rows_[static_cast<size_t>(i) * dim]);
    }
    // Repeated ids of the batch are summed by the client; rows are copied before it returns.
    Ticket t =
        client_.PushRows(Table(f), &keys_[static_cast<size_t>(f) * n], n, field_rows_.data());
    pushes_.push_back(std::move(t));
  }
  const std::vector<TensorSpec>& tensors = model_.Tensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    pushes_.push_back(client_.Push(tensors[t].name, grads[t].data(), tensors[t].NumElements(),
                                   static_cast<double>(n)));
  }
  seconds_.encode += Since(mark);  // handing the pushes to the client
  ++steps_;
  Status s = client_.Clock();
  seconds_.clock += Since(mark);
  return s;
}

StatusOr<std::pair<double, double>> CtrTrainer::Evaluate() {
  if (Status s = Pull(test_); !s.ok()) return s;
  std::vector<double> p;
  model_.Predict(params_, rows_.data(), test_.dense.data(), test_.n, p);
  return std::make_pair(Auc(test_.labels, p), LogLoss(test_.labels, p));
}

Status CtrTrainer::Observe() {
  const int64_t clock = client_.clock();
  const bool measure =
      client_.rank() == 0 && (clock % o_.eval_every == 0 || clock >= o_.iterations);
  if (!measure && clock % o_.progress_every != 0) return Status();
  std::optional<std::pair<double, double>> result;
  if (measure) {
    auto r = Evaluate();
    if (!r.ok()) return r.status();
    result = *r;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  log_->Record(clock, client_.rank(), loss_ewma_,
               result ? std::optional<double>(result->first) : std::nullopt, 0);
  std::printf(
      "iter %lld/%d  %.1f it/s  loss %.4f%s\n", static_cast<long long>(clock), o_.iterations,
      steps_ / std::max(secs, 1e-9), loss_ewma_,
      result
          ? fmt::format("  test AUC {:.4f} log-loss {:.4f}", result->first, result->second).c_str()
          : "");
  std::fflush(stdout);
  return Status();
}

Status CtrTrainer::Finish() {
  for (Ticket& t : pushes_) {
    if (Status s = t.Wait(); !s.ok()) return s;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  log_->Close();  // before the barrier: rank 0 merges every worker's file after it
  const ClientStats stats = client_.stats();
  WorkerTraffic traffic;
  traffic.partition_pushes = stats.pushes;
  traffic.bytes_pushed = stats.bytes_pushed;
  traffic.bytes_pulled = stats.bytes_pulled;
  if (Status s = WriteWorkerTraffic(o_.run_dir, client_.rank(), traffic); !s.ok()) return s;
  if (Status s = client_.Barrier(); !s.ok()) return s;
  if (client_.rank() != 0) return Status();
  auto r = Evaluate();
  if (!r.ok()) return r.status();
  std::printf(
      "final test AUC %.4f (teacher %.4f), log-loss %.4f after %d iterations per worker "
      "in %.1f s\n",
      r->first, teacher_auc_, r->second, o_.iterations, wall);
  std::fflush(stdout);
  return WriteSummary(r->first, r->second, wall);
}

Status CtrTrainer::WriteSummary(double auc, double logloss, double wall) const {
  if (o_.run_dir.empty()) return Status();
  RunSummary summary;
  summary.accuracy = auc;
  summary.wall_s = wall;
  summary.iterations = o_.iterations;
  summary.workers = client_.num_workers();
  summary.samples = static_cast<int64_t>(o_.iterations) * o_.batch * client_.num_workers();
  summary.consistency = client_.consistency();
  summary.device = "cpu";
  summary.step = seconds_.Per(steps_);
  summary.model = "ctr";
  summary.figures = {{"auc", auc}, {"logloss", logloss}, {"teacher_auc", teacher_auc_}};
  if (Status s = FinishRun(o_.run_dir, summary); !s.ok()) return s;
  std::printf("run files in %s: metrics.csv, plot.png, summary.json\n", o_.run_dir.c_str());
  return Status();
}

}  // namespace

Status ValidateCtrOptions(const CtrOptions& o) {
  if (o.ids_per_field < 1 || !(o.zipf > 0) || o.dim < 1 || o.hidden < 1 || o.test_samples < 2) {
    return Status::InvalidArgument(
        "ctr: ids_per_field, dim and hidden must be >= 1, zipf > 0, test_samples >= 2");
  }
  return Status();
}

Status RunCtrTraining(Client& client, const TrainOptions& o, const std::atomic<bool>& stop) {
  if (Status s = ValidateCtrOptions(o.ctr); !s.ok()) return s;
  CtrTrainer trainer(client, o);
  if (Status s = trainer.Prepare(); !s.ok()) return s;
  while (client.clock() < o.iterations && !stop.load()) {
    if (Status s = trainer.Step(); !s.ok()) return s;
    if (Status s = trainer.Observe(); !s.ok()) return s;
  }
  if (stop.load()) return Status::Aborted("interrupted");
  return trainer.Finish();
}

}  // namespace hetps
