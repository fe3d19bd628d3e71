// The CTR workload (hetps-worker --workload=train --model=ctr; deploy/ctr.flags): click-through
// rate prediction over sparse embedding tables (docs/tables.md). One table per categorical
// field ("C1".."C26", rows of `dim` floats, row-wise `table_optimizer` on the servers) and the
// dense layers of CtrModel (worker/ctr/ctr_model.h), on data streamed from CtrData
// (worker/ctr/ctr_data.h). Each iteration draws a minibatch, pulls its ids' rows from every
// table and the dense layers at once, computes, pushes the rows' gradients (repeated ids summed
// by the client) and the dense gradients, and ends the clock. Rank 0 measures AUC and log-loss
// on a fixed test set every eval_every clocks and at the end, beside the teacher's AUC (the
// best achievable); the run's folder gets metrics.csv (its accuracy column holds the AUC),
// summary.json (auc, logloss, teacher_auc) and plot.png.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "hetps/client.h"

namespace hetps {

struct TrainOptions;

struct CtrOptions {
  uint64_t ids_per_field = 1000000;
  double zipf = 1.05;
  int dim = 16;
  int hidden = 64;
  int test_samples = 20000;
  std::string table_optimizer = "adagrad:lr=0.1";
};

Status ValidateCtrOptions(const CtrOptions& o);
Status RunCtrTraining(Client& client, const TrainOptions& options, const std::atomic<bool>& stop);

}  // namespace hetps
