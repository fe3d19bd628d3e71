// VirtualRound: how long an edge client's round takes in virtual time (--clock=virtual,
// docs/virtual-time.md), from its models rather than the host: the download of the global model
// and the upload of its delta through its emulated link (the same LinkShaper the transport
// uses, run on the virtual clock: bandwidth, latency, jitter and losses, seeded per client), and
// its local training from its device model: samples x the model's training FLOPs per sample /
// (the reference device's sustained GFLOP/s) x the client's slowdown (its spread draw).
//
// A round's pulls are taken as one request and one reply of every byte pulled, its pushes as one
// message of every byte pushed and one answer; the requests' own bytes are kRequestBytes.
//
// Thread-safety: none.
#pragma once

#include <cstdint>

#include "hetps/link.h"
#include "worker/link_shaper.h"
#include "worker/train/model.h"

namespace hetps {

// Forward and backward FLOPs of one sample through `arch` (3x the forward pass: the backward
// pass costs about twice the forward one).
double TrainingFlopsPerSample(const Architecture& arch);

class VirtualRound {
 public:
  static constexpr size_t kRequestBytes = 64;
  // gflops > 0, slowdown >= 1.
  VirtualRound(const LinkOptions& link, double flops_per_sample, double gflops, double slowdown)
      : shaper_(link), flops_per_sample_(flops_per_sample), gflops_(gflops), slowdown_(slowdown) {}

  // When the global model of `bytes`, asked for at t, has arrived.
  double Download(double t, int64_t bytes);
  // When training on `samples` samples (every epoch's) started at t ends.
  double Compute(double t, int64_t samples) const;
  // When the delta of `bytes`, sent at t, is acknowledged.
  double Upload(double t, int64_t bytes);

 private:
  LinkShaper shaper_;
  double flops_per_sample_;
  double gflops_;
  double slowdown_;
};

}  // namespace hetps
