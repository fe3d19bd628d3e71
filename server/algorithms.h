// The catalogue of every registered algorithm a server runs or decodes: consistency
// controllers, aggregators (with the controllers each combines with), optimizers and codecs,
// generated from the registries. `hetps-server --list` prints it; docs/algorithms.md holds its
// Markdown form (docs/generate.py), and DocsTest keeps the two equal.
#pragma once

#include <string>

namespace hetps {

// Plain text for a terminal, or Markdown (markdown = true).
std::string AlgorithmCatalogue(bool markdown);

}  // namespace hetps
