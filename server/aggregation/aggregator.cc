#include "server/aggregation/aggregator.h"

#include <fmt/format.h>

#include <cmath>

namespace hetps {

double PolynomialStaleness(int64_t sigma, double a) {
  return std::pow(1.0 + static_cast<double>(std::max<int64_t>(sigma, 0)), -a);
}

double HingeStaleness(int64_t sigma, double a, double b) {
  const double s = static_cast<double>(std::max<int64_t>(sigma, 0));
  return s <= b ? 1.0 : 1.0 / (a * (s - b) + 1.0);
}

Status ValidateAggregator(const AggregatorOptions& o) {
  if (o.name != "sum" && o.name != "fedavg" && o.name != "fedbuff" && o.name != "fedasync" &&
      o.name != "temporal") {
    return Status::InvalidArgument(fmt::format(
        "unknown aggregator '{}' (known: sum, fedavg, fedbuff, fedasync, temporal)", o.name));
  }
  if (o.staleness_lr != "none" && o.staleness_lr != "inverse") {
    return Status::InvalidArgument(
        fmt::format("staleness_lr must be none or inverse, got '{}'", o.staleness_lr));
  }
  if (o.delay_compensation != "none" && o.delay_compensation != "dcasgd") {
    return Status::InvalidArgument(
        fmt::format("delay_compensation must be none or dcasgd, got '{}'", o.delay_compensation));
  }
  if (o.fedbuff_k < 1) return Status::InvalidArgument("fedbuff_k must be >= 1");
  if (o.staleness_exponent < 0 || o.hinge_a <= 0 || o.hinge_b < 0 || o.dcasgd_lambda < 0) {
    return Status::InvalidArgument(
        "staleness_exponent, hinge_b and dcasgd_lambda must be >= 0, hinge_a > 0");
  }
  if (!(o.fedasync_alpha > 0 && o.fedasync_alpha <= 1)) {
    return Status::InvalidArgument("fedasync_alpha must be in (0, 1]");
  }
  if (o.fedasync_staleness != "constant" && o.fedasync_staleness != "polynomial" &&
      o.fedasync_staleness != "hinge") {
    return Status::InvalidArgument(
        fmt::format("fedasync_staleness must be constant, polynomial or hinge, got '{}'",
                    o.fedasync_staleness));
  }
  return Status();
}

std::unique_ptr<Aggregator> MakeAggregator(const AggregatorOptions& o, const Optimizer& optimizer) {
  if (o.name == "fedbuff") return MakeFedBuff(o, optimizer);
  if (o.name == "fedasync") return MakeFedAsync(o);
  if (o.name == "temporal") return MakeTemporal();
  return MakeSum(o, optimizer);
}

}  // namespace hetps
