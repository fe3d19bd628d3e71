// Delay compensation (ALGORITHMS.md §6): what the sum aggregator does to a gradient before the
// optimizer sees it, knowing who sent it, how stale it is, what that worker last read and the
// training loss it reported with it. Chosen by sum's `compensation` parameter
// (--aggregator=sum:compensation=dcasgd,lambda=0.04); every compensator's own parameters are
// sum's parameters too. One instance per partition, inside its aggregator, driven only by the
// partition's owning thread.
//
// Adding a compensator: one file that defines `void Register<Name>(CompensatorRegistry&)`, one
// line in compensators.def, and its test.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "common/registry.h"
#include "common/status.h"

namespace hetps {

namespace proto {
class AggregatorState;
}  // namespace proto

struct CompensationInput {
  int32_t worker = 0;
  int64_t version = 0;       // the partition's version now
  int64_t base_version = 0;  // the version the gradient was computed from
  // The training loss of the minibatch behind the gradient, as the worker reported it
  // (Client::SetLoss); NaN when it reported none.
  double loss = std::numeric_limits<double>::quiet_NaN();
  int64_t n = 0;
  const float* values = nullptr;  // the partition's values now
  // The values the worker last read (only for compensators that need_reads); nullptr when it
  // has not read since the aggregator started.
  const float* read = nullptr;
};

class Compensator {
 public:
  virtual ~Compensator() = default;
  // The gradient to apply for the n floats `g`: g itself, or `out` (resized to n) filled.
  virtual const float* Compensate(const CompensationInput& in, const float* g,
                                  std::vector<float>& out) = 0;
  // Whether it needs what each worker last read (the aggregator then keeps a snapshot per
  // worker, and a durable server logs reads).
  virtual bool needs_reads() const { return false; }
  // Durability: the state kept between pushes, saved beside the aggregator's own.
  virtual void Save(proto::AggregatorState& /*out*/) const {}
  virtual Status Load(const proto::AggregatorState& /*in*/) { return Status(); }
};

struct CompensatorEntry {
  // `spec` is the sum aggregator's spec: the compensator reads its own parameters there.
  std::function<std::unique_ptr<Compensator>(const AlgorithmSpec& spec)> make;
};
using CompensatorRegistry = Registry<CompensatorEntry>;
const CompensatorRegistry& Compensators();

// sum's parameters for compensation: `compensation` (none, or a compensator's name), then the
// parameters every compensator declared (one entry per name).
std::vector<ParamDef> CompensationParams();
// The compensator `spec` (a sum spec) names, or nullptr for none.
std::unique_ptr<Compensator> MakeCompensator(const AlgorithmSpec& spec);

#define HETPS_COMPENSATOR(Name) void Register##Name(CompensatorRegistry& r);
#include "server/aggregation/compensators.def"
#undef HETPS_COMPENSATOR

}  // namespace hetps
