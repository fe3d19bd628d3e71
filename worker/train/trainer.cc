#include "worker/train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "worker/train/model.h"
#include "worker/train/partitioner.h"
#include "worker/train/run_log.h"

namespace hetps {
namespace {

using Clock = std::chrono::steady_clock;

std::string PathOr(const std::string& given, const std::string& fallback) {
  return given.empty() ? fallback : given;
}

// Issues one request per tensor and waits for them all.
template <typename Op>
Status ForEachTensor(const std::vector<TensorSpec>& tensors, Op op) {
  std::vector<Ticket> tickets;
  for (size_t t = 0; t < tensors.size(); ++t) tickets.push_back(op(t));
  for (const Ticket& ticket : tickets) {
    if (Status s = ticket.Wait(); !s.ok()) return s;
  }
  return Status();
}

Status PullModel(Client& client, const std::vector<TensorSpec>& tensors, Params& params) {
  return ForEachTensor(tensors, [&](size_t t) {
    return client.Pull(tensors[t].name, params[t].data(), tensors[t].NumElements());
  });
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
  if (o.partition != "iid" && o.partition != "dirichlet") {
    return Status::InvalidArgument(
        fmt::format("unknown partition '{}' (iid, dirichlet)", o.partition));
  }
  return Status();
}

Status RunTraining(Client& client, const TrainOptions& o, const std::atomic<bool>& stop) {
  if (Status s = ValidateTrainOptions(o); !s.ok()) return s;
  auto train = LoadIdxPair(PathOr(o.train_images, FashionMnistImages(o.data_dir, "train")),
                           PathOr(o.train_labels, FashionMnistLabels(o.data_dir, "train")));
  if (!train.ok()) return train.status();
  std::optional<Dataset> test;
  if (client.rank() == 0) {
    auto t = LoadIdxPair(PathOr(o.test_images, FashionMnistImages(o.data_dir, "t10k")),
                         PathOr(o.test_labels, FashionMnistLabels(o.data_dir, "t10k")));
    if (!t.ok()) return t.status();
    test = std::move(*t);
  }
  auto parts = o.partition == "dirichlet"
                   ? PartitionDirichlet(train->y, train->classes, client.num_workers(),
                                        o.dirichlet_alpha, o.seed)
                   : PartitionIid(train->size, client.num_workers(), o.seed);
  const auto histogram = LabelHistogram(parts, train->y, train->classes);
  spdlog::info("rank {} trains on {} samples, labels [{}]", client.rank(),
               parts[client.rank()].size(), fmt::join(histogram[client.rank()], " "));

  auto arch = BuildArchitecture(o.model, {1, train->rows, train->cols}, train->classes, o.hidden);
  if (!arch.ok()) return arch.status();
  SetComputeThreads(o.compute_threads);
  auto made = MakeModel(std::move(*arch), o.device);
  if (!made.ok()) return made.status();
  Model& model = **made;
  const std::vector<TensorSpec> tensors = model.Tensors();
  if (Status s = client.DeclareTensors(tensors); !s.ok()) return s;
  // Every worker offers the same seeded start; the first Init of each partition wins (servers
  // with --init=worker), otherwise the servers' own initializer stands.
  Params params = model.Init(o.seed);
  if (Status s = ForEachTensor(tensors,
                               [&](size_t t) {
                                 return client.Init(tensors[t].name, params[t].data(),
                                                    tensors[t].NumElements());
                               });
      !s.ok()) {
    return s;
  }
  Params grads[2] = {model.Zeros(), model.Zeros()};  // one in flight while the next is computed
  std::vector<Ticket> in_flight;
  auto log = RunLog::Open(o.run_dir, client.rank());
  if (!log.ok()) return log.status();
  Batches batches(std::move(parts[client.rank()]), o.seed * 1000003 + client.rank());
  std::vector<float> x;
  std::vector<int32_t> y;
  const auto start = Clock::now();
  double loss_ewma = -1;
  for (int it = 0; client.clock() < o.iterations && !stop.load(); ++it) {
    client.BeginIteration();  // evaluation below is not iteration time
    if (Status s = PullModel(client, tensors, params); !s.ok()) return s;
    const auto compute_start = Clock::now();
    Params& g = grads[it % 2];
    for (const Ticket& t : in_flight) {  // the buffer we reuse is two pushes back
      if (Status s = t.Wait(); !s.ok()) return s;
    }
    in_flight.clear();
    batches.Next(*train, o.batch, x, y);
    auto computed = model.LossAndGradients(params, x.data(), y.data(), o.batch, g);
    if (!computed.ok()) return computed.status();
    const double loss = *computed;
    loss_ewma = loss_ewma < 0 ? loss : 0.95 * loss_ewma + 0.05 * loss;
    if (o.slowdown > 1.0) {
      std::this_thread::sleep_for((Clock::now() - compute_start) * (o.slowdown - 1.0));
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      in_flight.push_back(
          client.Push(tensors[t].name, g[t].data(), tensors[t].NumElements(), o.batch));
    }
    if (Status s = client.Clock(); !s.ok()) return s;
    const int64_t clock = client.clock();
    const bool eval = test && (clock % o.eval_every == 0 || clock >= o.iterations);
    std::optional<double> accuracy;
    if (eval) {
      auto a = model.Accuracy(params, test->x.data(), test->y.data(), test->size);
      if (!a.ok()) return a.status();
      accuracy = *a;
    }
    if (clock % o.log_every == 0 || eval) {
      if (accuracy) {
        client.ReportMetrics({{"loss", loss_ewma}, {"accuracy", *accuracy}});
      } else {
        client.ReportMetrics({{"loss", loss_ewma}});
      }
      log->Record(clock, client.rank(), loss_ewma, accuracy, client.stats().max_staleness);
    }
    if (clock % o.progress_every == 0 || eval) {
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      const std::string acc = accuracy ? fmt::format("  test accuracy {:.4f}", *accuracy) : "";
      std::printf("epoch %.2f  iter %lld/%d  %.1f it/s  loss %.4f%s  staleness max %lld\n",
                  batches.epoch(), static_cast<long long>(clock), o.iterations, (it + 1) / secs,
                  loss_ewma, acc.c_str(), static_cast<long long>(client.stats().max_staleness));
      std::fflush(stdout);
    }
  }
  for (const Ticket& t : in_flight) {
    if (Status s = t.Wait(); !s.ok()) return s;
  }
  if (stop.load()) return Status::Aborted("interrupted");
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  const ClientStats stats = client.stats();
  std::printf(
      "rank %d pushed %lld bytes (%lld as float32: %.1fx less)\n", client.rank(),
      static_cast<long long>(stats.bytes_pushed), static_cast<long long>(stats.raw_bytes_pushed),
      stats.bytes_pushed ? static_cast<double>(stats.raw_bytes_pushed) / stats.bytes_pushed : 0.0);
  std::fflush(stdout);
  log->Close();  // before the barrier: rank 0 merges every worker's file after it
  if (Status s = client.Barrier(); !s.ok()) return s;
  if (!test) return Status();
  if (Status s = PullModel(client, tensors, params); !s.ok()) return s;
  auto evaluated = model.Accuracy(params, test->x.data(), test->y.data(), test->size);
  if (!evaluated.ok()) return evaluated.status();
  const double final_accuracy = *evaluated;
  std::printf("final test accuracy %.4f after %d iterations per worker in %.1f s\n", final_accuracy,
              o.iterations, secs);
  if (!o.run_dir.empty()) {
    RunSummary summary;
    summary.test_accuracy = final_accuracy;
    summary.wall_s = secs;
    summary.iterations = o.iterations;
    summary.workers = client.num_workers();
    summary.samples = static_cast<int64_t>(o.iterations) * o.batch * client.num_workers();
    summary.consistency = client.consistency();
    if (Status s = FinishRun(o.run_dir, summary); !s.ok()) return s;
    std::printf("run files in %s: metrics.csv, plot.png, summary.json\n", o.run_dir.c_str());
  }
  std::fflush(stdout);
  return Status();
}

}  // namespace hetps
