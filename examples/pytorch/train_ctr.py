#!/usr/bin/env python3
"""Click-through-rate prediction with sparse embedding tables through hetps: one worker.

    hetps launch --servers 2 --workers 2 --optimizer=adam:lr=0.003 --init=worker \\
        --worker_cmd='/usr/bin/python3 examples/pytorch/train_ctr.py' --iterations=600

The model is how CTR models are built: one embedding table per categorical field (26 fields,
dim 16, each a hetps table: hetps.torch.EmbeddingBag, row-wise Adagrad on the servers), 13
numeric features, an MLP over their concatenation, logistic loss. The data is Criteo-shaped and
generated here, seeded (no click log can be downloaded): each field's ids follow a Zipf law over
--ids_per_field ids, and the labels come from a hidden teacher (a factorization machine over the
same ids and a linear term in the numeric features, plus Bernoulli noise), so the best
achievable AUC is known: the teacher's own on the test set, reported beside the trained AUC.
Each worker streams its own samples (seeded by rank; nothing is materialized); rank 0 evaluates
AUC and log-loss on a fixed test set every --eval_every clocks. The run's folder gets
metrics.csv (its accuracy column holds the AUC), summary.json (auc, logloss, teacher_auc) and
plot.png, as for the other workloads.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import hetps
import hetps.torch

FIELDS, DENSE, DIM = 26, 13, 16
M1, M2, GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(
    0x9E3779B97F4A7C15)


def mix(z):
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * M1
        z = (z ^ (z >> np.uint64(27))) * M2
    return z ^ (z >> np.uint64(31))


def normals(keys, salt, k=1):
    """k standard normals per key, a pure function of (key, salt)."""
    with np.errstate(over="ignore"):
        base = mix(keys.astype(np.uint64) ^ np.uint64(salt))[..., None] + GOLD * (
            2 * np.arange(k, dtype=np.uint64) + np.uint64(1))
    a, b = mix(base), mix(base ^ np.uint64(0xD1B54A32D192ED03))
    u1 = ((a >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0 ** 53
    u2 = ((b >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0 ** 53
    return np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)


class CtrData:
    """Criteo-shaped samples: 26 Zipf-distributed categorical ids, 13 numeric features, labels
    from a teacher factorization machine. Ids of field f are (f + 1) << 40 | rank."""

    def __init__(self, ids_per_field, zipf, seed):
        self.n, self.s, self.seed = ids_per_field, zipf, seed
        rng = np.random.default_rng(seed)
        self.dense_weights = rng.normal(0, 0.3, DENSE)

    def ranks(self, rng, shape):
        """Zipf ranks in [1, n] by inverting the continuous law's CDF (close to the discrete one)."""
        u = rng.random(shape)
        if abs(self.s - 1) < 1e-9:
            return np.floor(np.exp(u * np.log(self.n + 1))).clip(1, self.n).astype(np.uint64)
        top = (self.n + 1) ** (1 - self.s)
        x = (1 + u * (top - 1)) ** (1 / (1 - self.s))
        return np.floor(x).clip(1, self.n).astype(np.uint64)

    def teacher_logit(self, ids, dense):
        # Popular ids carry the signal, as in click logs: an id's effects shrink with its rank.
        rank = (ids & np.uint64((1 << 40) - 1)).astype(np.float64)
        scale = 1 / np.sqrt(1 + rank / 50)
        w = normals(ids, self.seed, 1)[..., 0] * 0.7 * scale         # (n, 26) per-id bias
        v = normals(ids, self.seed + 1, 4) * (0.2 * scale)[..., None]  # (n, 26, 4) factors
        pairs = 0.5 * ((v.sum(1) ** 2).sum(1) - (v ** 2).sum((1, 2)))
        return -1.0 + w.sum(1) + pairs + dense @ self.dense_weights

    def batch(self, rng, size):
        ranks = self.ranks(rng, (size, FIELDS))
        ids = (np.arange(1, FIELDS + 1, dtype=np.uint64) << np.uint64(40)) | ranks
        dense = np.log1p(rng.lognormal(0, 1, (size, DENSE))) - 0.8
        p = 1 / (1 + np.exp(-self.teacher_logit(ids, dense)))
        y = (rng.random(size) < p).astype(np.float32)
        return ids.astype(np.int64), dense.astype(np.float32), y, p


def auc(y, score):
    """Area under the ROC curve (Mann-Whitney), ties given half."""
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    if (counts > 1).any():  # average the ranks of tied scores
        sums = np.zeros(len(counts))
        np.add.at(sums, inverse, ranks)
        ranks = (sums / counts)[inverse]
    pos = y > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / max(1, n_pos * n_neg)


def logloss(y, p):
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


class Ctr(nn.Module):
    def __init__(self, client, table_optimizer):
        super().__init__()
        self.tables = nn.ModuleList([
            hetps.torch.EmbeddingBag(client, f"C{f + 1}", DIM, mode="sum", init="normal",
                                     init_scale=0.01, optimizer=table_optimizer, layer=0)
            for f in range(FIELDS)])
        self.mlp = nn.Sequential(nn.Linear(FIELDS * DIM + DENSE, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, ids, dense):
        bags = torch.arange(len(ids), dtype=torch.int64)
        columns = [ids[:, f].contiguous() for f in range(FIELDS)]
        for t, c in zip(self.tables, columns):  # every field's pull in flight at once
            t.prefetch(c)
        emb = [t(c, bags) for t, c in zip(self.tables, columns)]
        return self.mlp(torch.cat(emb + [dense], 1)).squeeze(1)


def evaluate(model, test):
    ids, dense, y = test
    with torch.no_grad():
        p = torch.sigmoid(model(torch.from_numpy(ids), torch.from_numpy(dense))).numpy()
    return auc(y, p), logloss(y, p)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scheduler", default="", help="default: $HETPS_SCHEDULER")
    p.add_argument("--rank", type=int, default=None, help="default: $HETPS_RANK, else any")
    p.add_argument("--iterations", type=int, default=600, help="clocks per worker")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--ids_per_field", type=int, default=1000000)
    p.add_argument("--zipf", type=float, default=1.05)
    p.add_argument("--test_samples", type=int, default=20000)
    p.add_argument("--table_optimizer", default="adagrad:lr=0.1")
    p.add_argument("--eval_every", type=int, default=500)
    p.add_argument("--progress_every", type=int, default=250)
    p.add_argument("--run_dir", default="")
    p.add_argument("--data_seed", type=int, default=1)
    args, ignored = p.parse_known_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.data_seed)  # every worker offers the same initial dense layers

    client = hetps.Client(args.scheduler, rank=args.rank)
    rank, workers = client.rank, client.num_workers
    if ignored and rank == 0:
        print(f"ignoring flags meant for hetps-worker: {' '.join(ignored)}", flush=True)
    model = Ctr(client, args.table_optimizer)
    opt = hetps.torch.DistributedOptimizer(model.mlp, client, weight=1.0,
                                           embeddings=list(model.tables))
    data = CtrData(args.ids_per_field, args.zipf, args.data_seed)
    rng = np.random.default_rng([args.data_seed, 1 + rank])
    test = teacher = None
    if rank == 0:
        ids, dense, y, p_teacher = data.batch(np.random.default_rng([args.data_seed, 0]),
                                              args.test_samples)
        test, teacher = (ids, dense, y), auc(y, p_teacher)
        print(f"test set: {args.test_samples} samples, CTR {y.mean():.3f}, teacher AUC "
              f"{teacher:.4f}, teacher log-loss {logloss(y, p_teacher):.4f}", flush=True)

    log = hetps.RunLog(args.run_dir, rank)
    start, loss_ewma, result = time.time(), None, None
    for it in range(args.iterations):
        client.begin_iteration()
        ids, dense, y, _ = data.batch(rng, args.batch)
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(
            model(torch.from_numpy(ids), torch.from_numpy(dense)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        loss_ewma = loss.item() if loss_ewma is None else 0.98 * loss_ewma + 0.02 * loss.item()
        clock = client.current_clock
        measure = test is not None and (clock % args.eval_every == 0 or clock >= args.iterations)
        if measure:
            opt.synchronize()
            result = evaluate(model, test)
        if clock % args.progress_every == 0 or measure:
            shown = f"  test AUC {result[0]:.4f} log-loss {result[1]:.4f}" if measure else ""
            client.report_metrics({"loss": loss_ewma, **({"auc": result[0]} if measure else {})})
            log.record(clock, rank, loss_ewma, result[0] if measure else None, 0)
            print(f"iter {clock}/{args.iterations}  {(it + 1) / (time.time() - start):.1f} it/s  "
                  f"loss {loss_ewma:.4f}{shown}", flush=True)

    opt.close()
    wall = time.time() - start
    log.close()  # before the barrier: rank 0 merges every worker's file after it
    client.barrier()
    if test is not None:
        opt.pull()
        opt.synchronize()
        final_auc, final_logloss = evaluate(model, test)
        print(f"final test AUC {final_auc:.4f} (teacher {teacher:.4f}), log-loss "
              f"{final_logloss:.4f} after {args.iterations} iterations per worker in {wall:.1f} s",
              flush=True)
        if args.run_dir:
            hetps.finish_run(args.run_dir, final_auc, wall, args.iterations, workers,
                             args.iterations * args.batch * workers, client.consistency,
                             "cpu (pytorch)")
            path = os.path.join(args.run_dir, "summary.json")
            summary = json.load(open(path))
            summary.update(auc=final_auc, logloss=final_logloss, teacher_auc=teacher,
                           model="ctr")
            json.dump(summary, open(path, "w"), indent=2)
    client.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
