// The catalogue of every registered algorithm a server runs or decodes: consistency
// controllers, aggregators (with the controllers each combines with), optimizers and codecs,
// generated from the registries. `hetps-server --list` prints it; the README's tables are its
// Markdown form, and a test keeps the two equal.
#pragma once

#include <string>

namespace hetps {

// Plain text for a terminal, or Markdown (markdown = true).
std::string AlgorithmCatalogue(bool markdown);

}  // namespace hetps
