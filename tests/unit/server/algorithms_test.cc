#include "server/algorithms.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/compress/codec.h"
#include "server/aggregation/aggregator.h"
#include "server/aggregation/compensator.h"
#include "server/consistency/controller.h"
#include "server/optimizer/optimizer.h"

namespace hetps {
namespace {

// Every registered algorithm of every kind has its own entry: a line that starts with its
// name (a substring would not do: "dssp" contains "ssp"), and a row of its kind's table.
TEST(AlgorithmsTest, CatalogueListsEveryKind) {
  const std::string text = AlgorithmCatalogue(false), markdown = AlgorithmCatalogue(true);
  const SpecRegistry* kinds[] = {&Controllers(), &Aggregators(), &Compensators(), &Optimizers(),
                                 &compress::Codecs()};
  int entries = 0;
  for (const SpecRegistry* kind : kinds) {
    EXPECT_NE(text.find(kind->kind() + " (--"), std::string::npos) << kind->kind();
    ASSERT_FALSE(kind->Names().empty()) << kind->kind();
    for (const std::string& name : kind->Names()) {
      EXPECT_NE(text.find(fmt::format("\n  {:<12} ", name)), std::string::npos)
          << kind->kind() << " " << name;
      EXPECT_NE(markdown.find(fmt::format("\n| `{}` | ", name)), std::string::npos)
          << kind->kind() << " " << name;
      ++entries;
    }
  }
  EXPECT_GE(entries, 30);
  EXPECT_NE(text.find("staleness=2"), std::string::npos);  // parameters with their defaults
}

}  // namespace
}  // namespace hetps
