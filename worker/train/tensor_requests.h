// Helpers of the workloads that drive every tensor of a model at once (the trainer, the edge
// client): one request per tensor, then a wait for them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/shard_map.h"
#include "common/status.h"
#include "hetps/client.h"
#include "worker/train/model.h"

namespace hetps {

// Issues op(t) (a Ticket) for every tensor index t, then waits for all of them; the first
// failure is returned once every ticket completed or failed.
template <typename Op>
Status ForEachTensor(const std::vector<TensorSpec>& tensors, Op op) {
  std::vector<Ticket> tickets;
  for (size_t t = 0; t < tensors.size(); ++t) tickets.push_back(op(t));
  Status first;
  for (const Ticket& ticket : tickets) {  // all of them: each holds its tensor's buffer
    if (Status s = ticket.Wait(); !s.ok() && first.ok()) first = s;
  }
  return first;
}

// Declares the model's tensors (collective) and offers its seeded initial values, which
// become `values`: every worker offers the same start and the first Init of each partition wins
// (servers with --init=worker; otherwise the servers' own initializer stands).
inline Status DeclareAndInit(Client& client, const Model& model, uint64_t seed, Params& values) {
  const std::vector<TensorSpec>& tensors = model.Tensors();
  if (Status s = client.DeclareTensors(tensors); !s.ok()) return s;
  values = model.Init(seed);
  return ForEachTensor(tensors, [&](size_t t) {
    return client.Init(tensors[t].name, values[t].data(), tensors[t].NumElements());
  });
}

}  // namespace hetps
