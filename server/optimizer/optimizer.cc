#include "server/optimizer/optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <map>

namespace hetps {
namespace {

using Factory = std::function<std::unique_ptr<Optimizer>(const OptimizerOptions&)>;

const std::map<std::string, Factory>& Registry() {
  static const std::map<std::string, Factory> registry = {
      {"sgd", MakeSgd}, {"momentum", MakeMomentum}, {"adam", MakeAdam}, {"adagrad", MakeAdagrad}};
  return registry;
}

}  // namespace

std::vector<std::string> OptimizerNames() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : Registry()) names.push_back(name);
  return names;
}

StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const std::string& name,
                                                   const OptimizerOptions& options) {
  auto it = Registry().find(name);
  if (it == Registry().end()) {
    return Status::InvalidArgument(
        fmt::format("unknown optimizer '{}' (known: {})", name, fmt::join(OptimizerNames(), ", ")));
  }
  if (!(options.lr > 0))
    return Status::InvalidArgument(fmt::format("lr must be > 0, got {}", options.lr));
  return it->second(options);
}

}  // namespace hetps
