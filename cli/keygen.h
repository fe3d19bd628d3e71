// `hetps keygen --out DIR [--add=ROLE:NAME]...`: the cluster's key material for --auth=curve
// (common/auth.h). Into a new DIR: a key pair for each role (scheduler, server, worker,
// operator) and the allow-list admitting the server, worker and operator keys. Into a DIR
// that has key material: more pairs (per-node keys, e.g. --add=worker:edge-7), appended to its
// allow-list. An existing pair is never overwritten.
#pragma once

#include <string>
#include <vector>

#include "common/auth.h"
#include "common/status.h"

namespace hetps {

struct KeygenArgs {
  std::string out;
  std::vector<CurveKey> add;  // name and role of each pair to add
};

StatusOr<KeygenArgs> ParseKeygenArgs(const std::vector<std::string>& args);
// Writes the keys and returns what to print: the files and which of them each role needs.
StatusOr<std::string> RunKeygen(const KeygenArgs& args);

}  // namespace hetps
