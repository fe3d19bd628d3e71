// Aggregator: *how* the pushes to one partition combine into its values (ALGORITHMS.md §3-6),
// orthogonal to the consistency controller, which decides *when*. One instance per partition,
// driven only by the partition's owning thread. Chosen by a spec string
// (--aggregator=fedbuff:k=8,exponent=0.5) from the registry below; each aggregator declares
// which of the controllers' apply schedules it is defined for (schedules), and every other
// combination is refused at start and on a live switch. `hetps-server --list` prints them all.
// Staleness sigma = the partition's version now - the version the push was computed from.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/registry.h"
#include "common/status.h"
#include "server/consistency/controller.h"
#include "server/optimizer/optimizer.h"

namespace hetps {

namespace proto {
class AggregatorState;
class FloatsByWorker;
}  // namespace proto
class PartitionState;

struct PushInfo {
  int32_t worker = 0;
  int64_t clock = 0;
  int64_t base_version = 0;
  double weight = 1;
  int32_t layer = 0;
  int64_t window = 0;  // softsync: gradients per step (0: apply each push on its own)
  // The training loss the worker reported with the push (Client::SetLoss); NaN: none.
  double loss = std::numeric_limits<double>::quiet_NaN();
};

class Aggregator {
 public:
  virtual ~Aggregator() = default;
  // Handles one push of info().length floats `g` (a gradient, or a model delta w_base - w_local).
  virtual void OnPush(PartitionState& part, const PushInfo& info, const float* g) = 0;
  // `worker` was just sent the partition's current values.
  virtual void OnPull(PartitionState& /*part*/, int32_t /*worker*/) {}
  // Applies whatever a consistency window left partially filled (on a policy switch).
  virtual void Flush(PartitionState& /*part*/) {}
  // Round-based aggregators (fedavg, temporal): a closed round hands over each of its updates,
  // then ends. An aggregator that returns false from rounds() leaves rounds to RoundSpec's
  // combine.
  virtual bool rounds() const { return false; }
  virtual void Upload(PartitionState& /*part*/, const PushInfo& /*info*/, const float* /*update*/) {
  }
  virtual void EndRound(PartitionState& /*part*/, int64_t /*clock*/) {}

  // Durability (--data_dir): the state kept between calls, as a restart needs it. Save writes
  // it into the partition's checkpoint; Load reads it back (into a fresh aggregator) before
  // the log after the checkpoint is replayed. Stateless aggregators keep the defaults.
  virtual void Save(proto::AggregatorState& /*out*/) const {}
  virtual Status Load(const proto::AggregatorState& /*in*/) { return Status(); }
  // Whether OnPull changes the state; a durable server then logs pulls for the replay.
  virtual bool tracks_reads() const { return false; }
};

// float32 arrays in saved aggregator state: the bytes of `v`, and back (Malformed when the
// size is not a whole number of floats).
std::string FloatBytes(const float* v, int64_t n);
inline std::string FloatBytes(const std::vector<float>& v) {
  return FloatBytes(v.data(), static_cast<int64_t>(v.size()));
}
Status FloatsFrom(const std::string& bytes, std::vector<float>& out);
// What some aggregators remember per worker: the values it last read.
using ReadSnapshots = std::map<int32_t, std::shared_ptr<const std::vector<float>>>;
void SaveByWorker(const ReadSnapshots& snapshots, proto::FloatsByWorker& out);
Status LoadByWorker(const proto::FloatsByWorker& in, ReadSnapshots& snapshots);

struct AggregatorEntry {
  // REQUIRES: `optimizer` outlives the aggregator.
  std::function<std::unique_ptr<Aggregator>(const AlgorithmSpec&, const Optimizer&)> make;
  // The controllers' apply schedules the aggregator is defined for; every other combination is
  // refused (and the tests derive what they expect from this list).
  std::vector<ApplySchedule> schedules;
  // Optional: what the aggregator's parameters leave undefined under one of `schedules` (an
  // error says why), e.g. a per-push option under rounds.
  std::function<Status(const AlgorithmSpec& spec, ApplySchedule schedule)> refine = nullptr;
  // Optional: whether, with these parameters, a push of several workers' gradients summed
  // (the aggregation tier's, docs/aggregation-tier.md) stands for those pushes: the aggregator
  // uses only their sum, never one push's own staleness, weight or reader. Null: never.
  std::function<bool(const AlgorithmSpec& spec)> presummable = nullptr;
};
using AggregatorRegistry = Registry<AggregatorEntry>;
// Every aggregator (aggregators.def).
const AggregatorRegistry& Aggregators();
// `aggregator` under the controller `consistency` (both validated specs), or why not.
Status CheckCombination(const AlgorithmSpec& aggregator, const AlgorithmSpec& consistency);

#define HETPS_AGGREGATOR(Name) void Register##Name(AggregatorRegistry& r);
#include "server/aggregation/aggregators.def"
#undef HETPS_AGGREGATOR

// Staleness weights, each 1 at sigma = 0 and non-increasing.
double PolynomialStaleness(int64_t sigma, double a);       // (1 + sigma)^-a
double HingeStaleness(int64_t sigma, double a, double b);  // 1 if sigma <= b, else 1/(a(sigma-b)+1)

// Temporal weights n_k * a^-(t - ts_k), a = e/2, normalized to sum to 1 (ALGORITHMS.md §5).
std::vector<double> TemporalWeights(const std::vector<double>& samples,
                                    const std::vector<int64_t>& timestamps, int64_t t);

}  // namespace hetps
