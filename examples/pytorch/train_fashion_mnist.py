#!/usr/bin/env python3
"""A PyTorch CNN trained on Fashion-MNIST through hetps: one worker of a cluster.

    hetps launch --servers 2 --workers 4 --optimizer=adam:lr=0.001 --init=worker \\
        --worker_cmd='/usr/bin/python3 examples/pytorch/train_fashion_mnist.py' --iterations=600

The launcher passes --scheduler, --rank, --run_dir and the worker flags (the ones below are
read; others, meant for hetps-worker, are ignored). Like hetps-worker's train workload, each
worker trains on its share of the training set, rank 0 evaluates on the 10k test set every
--eval_every clocks, and the run's folder gets worker-<rank>.csv files merged into metrics.csv,
summary.json and plot.png. The model is the C++ trainer's --model=cnn (LeNet-5 style: conv 5x5x6
padded, pool, conv 5x5x16, pool, 120, 84, 10); the servers own the optimizer.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import hetps
import hetps.torch


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(dataset_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(dataset_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(dataset_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def accuracy(model, x, y):
    with torch.no_grad():
        correct = 0
        for i in range(0, len(x), 2000):
            correct += (model(x[i:i + 2000]).argmax(1) == y[i:i + 2000]).sum().item()
    return correct / len(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scheduler", default="", help="default: $HETPS_SCHEDULER")
    p.add_argument("--rank", type=int, default=None, help="default: $HETPS_RANK, else any")
    p.add_argument("--iterations", type=int, default=600, help="clocks per worker")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--eval_every", type=int, default=100)
    p.add_argument("--progress_every", type=int, default=100)
    p.add_argument("--codec", default="none", help="push codec, e.g. topk:density=0.01,ef=1")
    p.add_argument("--pull_codec", default="none")
    p.add_argument("--run_dir", default="")
    p.add_argument("--data_seed", type=int, default=1)
    p.add_argument("--device", default="auto",
                   help="cpu, cuda (GPU local rank mod the visible ones) or auto (cuda if any)")
    p.add_argument("--dataset_dir", default="/usr/share/datasets/fashion-mnist")
    args, ignored = p.parse_known_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.data_seed)  # every worker offers the same initial model

    if args.device not in ("cpu", "cuda", "auto"):
        p.error(f"--device={args.device}: cpu, cuda or auto")
    device = torch.device("cpu") if args.device == "cpu" else hetps.torch.local_device()
    if args.device == "cuda" and device.type != "cuda":
        sys.exit("--device=cuda: torch sees no GPU")
    model = LeNet().to(device)
    client = hetps.Client(args.scheduler, rank=args.rank, push_codec=args.codec,
                          pull_codec=args.pull_codec)
    rank, workers = client.rank, client.num_workers
    if ignored and rank == 0:
        print(f"ignoring flags meant for hetps-worker: {' '.join(ignored)}", flush=True)
    opt = hetps.torch.DistributedOptimizer(model, client, weight=args.batch)

    x_train, y_train = load(args.dataset_dir, "train")
    mine = torch.arange(rank, len(x_train), workers)  # an iid share per worker
    x_train, y_train = x_train[mine].to(device), y_train[mine].to(device)
    test = [t.to(device) for t in load(args.dataset_dir, "test")] if rank == 0 else None
    generator = torch.Generator().manual_seed(args.data_seed * 1000 + rank)
    order, at, epoch = torch.randperm(len(x_train), generator=generator), 0, 0

    log = hetps.RunLog(args.run_dir, rank)
    start, loss_ewma = time.time(), None
    for it in range(args.iterations):
        client.begin_iteration()
        if at + args.batch > len(order):
            order, at, epoch = torch.randperm(len(x_train), generator=generator), 0, epoch + 1
        idx = order[at:at + args.batch].to(device)
        at += args.batch
        opt.zero_grad()
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        loss.backward()
        opt.step()
        loss_ewma = loss.item() if loss_ewma is None else 0.95 * loss_ewma + 0.05 * loss.item()

        clock = client.current_clock
        evaluate = test is not None and (clock % args.eval_every == 0 or clock >= args.iterations)
        acc = None
        if evaluate:
            opt.synchronize()
            acc = accuracy(model, *test)
        staleness = client.stats()["max_staleness"]
        if clock % args.progress_every == 0 or evaluate:
            client.report_metrics({"loss": loss_ewma, **({"accuracy": acc} if acc else {})})
            log.record(clock, rank, loss_ewma, acc, staleness)
            shown = f"  test accuracy {acc:.4f}" if acc is not None else ""
            print(f"epoch {epoch + at / len(x_train):.2f}  iter {clock}/{args.iterations}  "
                  f"{(it + 1) / (time.time() - start):.1f} it/s  loss {loss_ewma:.4f}{shown}  "
                  f"staleness max {staleness}", flush=True)

    opt.close()
    wall = time.time() - start
    stats = client.stats()
    ratio = stats["raw_bytes_pushed"] / stats["bytes_pushed"] if stats["bytes_pushed"] else 0
    print(f"rank {rank} pushed {stats['bytes_pushed']} bytes ({stats['raw_bytes_pushed']} as "
          f"float32: {ratio:.1f}x less)", flush=True)
    if device.type == "cuda":
        print(f"rank {rank} on {device}: {stats['device_encoded_partitions']} partitions encoded "
              f"on the device, {stats['device_raw_bytes']} raw bytes copied to the host, "
              f"{stats['device_pulled_bytes']} pulled bytes copied to the device", flush=True)
    log.close()  # before the barrier: rank 0 merges every worker's file after it
    client.barrier()
    if test is not None:
        opt.pull()
        opt.synchronize()
        final = accuracy(model, *test)
        print(f"final test accuracy {final:.4f} after {args.iterations} iterations per worker "
              f"in {wall:.1f} s", flush=True)
        if args.run_dir:
            hetps.finish_run(args.run_dir, final, wall, args.iterations, workers,
                             args.iterations * args.batch * workers, client.consistency,
                             "cpu (pytorch)")
    client.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
