#include "server/algorithms.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/compress/codec.h"
#include "server/aggregation/aggregator.h"
#include "server/aggregation/compensator.h"
#include "server/consistency/controller.h"
#include "server/optimizer/optimizer.h"
#include "server/table/eviction.h"
#include "server/table/table_serving.h"

namespace hetps {
namespace {

// Which aggregator (with its defaults) is defined under which controller.
std::string Combinations(bool markdown) {
  const std::vector<std::string> controllers = Controllers().Names();
  std::string s;
  if (markdown) {
    s = "| aggregator |";
    for (const auto& c : controllers) s += fmt::format(" `{}` |", c);
    s += "\n|---|";
    for (size_t i = 0; i < controllers.size(); ++i) s += "---|";
    s += "\n";
  } else {
    s = fmt::format("  {:<12}", "");
    for (const auto& c : controllers) s += fmt::format(" {:<10}", c);
    s += "\n";
  }
  for (const std::string& a : Aggregators().Names()) {
    const AlgorithmSpec aggregator = *Aggregators().Parse(a);
    s += markdown ? fmt::format("| `{}` |", a) : fmt::format("  {:<12}", a);
    for (const auto& c : controllers) {
      const bool ok = CheckCombination(aggregator, *Controllers().Parse(c)).ok();
      s += markdown ? fmt::format(" {} |", ok ? "yes" : "no")
                    : fmt::format(" {:<10}", ok ? "yes" : "-");
    }
    s += "\n";
  }
  return s;
}

}  // namespace

std::string AlgorithmCatalogue(bool markdown) {
  std::string s = Catalogue({{&Controllers(), "--consistency=NAME:key=value,..."},
                             {&Aggregators(), "--aggregator=NAME:key=value,..."},
                             {&Compensators(), "--aggregator=sum:compensation=NAME,key=value,..."},
                             {&Optimizers(), "--optimizer=NAME:key=value,..."},
                             {&compress::Codecs(), "--codec=NAME:key=value,..."},
                             {&Evictions(), "a table's eviction (TableOptions::eviction)"}},
                            markdown);
  s += markdown ? "Aggregators under each controller (with their defaults; sum's "
                  "staleness_lr=inverse and any compensation only where pushes apply one by "
                  "one):\n\n"
                : "aggregator x consistency (defined combinations)\n";
  s += Combinations(markdown);
  const std::string tables = fmt::format("{}", fmt::join(TableControllers(), ", "));
  s += markdown ? fmt::format(
                      "\nSparse tables are defined under consistency {} with the plain "
                      "sum aggregator; their row-wise rule is the table's optimizer.\n",
                      tables)
                : fmt::format("sparse tables: consistency {}, aggregator sum\n", tables);
  return s;
}

}  // namespace hetps
