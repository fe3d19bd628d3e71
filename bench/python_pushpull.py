#!/usr/bin/env python3
"""Push and pull throughput from Python against the C++ client, in one run.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_pushpull.py --bin_dir build/bin

Starts a scheduler and one server on loopback and one hetps.Client. For each size, push and pull
of one tensor, each waited, are timed from Python (client.push(...).wait() in a loop) and from
C++ through the same client and connection (client._native_loop: the same calls in a C++ loop),
alternating --rounds times; the ratio python / C++ is the module's overhead. One JSON line per
size and operation: medians over the rounds.

With --device cuda (PyTorch and a GPU), the same operations of a CUDA tensor (pushes raw, layer
0, and encoded on the device by --device_codec, layer 1) against, in the same run, a plain copy
of the same bytes between the device and pinned host memory (torch's copy_, synchronized) and
the host path of the same client (a numpy array): fields device_gbps, copy_gbps, host_gbps and
the ratios device_vs_copy and device_vs_host (bytes counted as float32, before encoding).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np

import hetps


def python_loop(client, op, name, array, seconds):
    call = client.push if op == "push" else client.pull
    ops, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call(name, array).wait()
        ops += 1
    return ops, time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin_dir", default=os.path.join(os.path.dirname(__file__), "../build/bin"))
    p.add_argument("--mb", default="1,16", help="tensor sizes in MiB")
    p.add_argument("--seconds", type=float, default=1.0, help="per loop")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--device_codec", default="topk:density=0.01,ef=1",
                   help="the encoded device push's codec (--device cuda)")
    args = p.parse_args()
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            p.error("--device cuda: torch sees no GPU")

    work = tempfile.mkdtemp(prefix="hetps-pybench-")
    ep = os.path.join(work, "endpoint")
    procs = [subprocess.Popen([os.path.join(args.bin_dir, "hetps-scheduler"), "--num_workers=1",
                               "--num_servers=1", f"--endpoint_file={ep}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(300):
            if os.path.exists(ep) and open(ep).read().strip():
                break
            time.sleep(0.02)
        endpoint = open(ep).read().strip()
        procs.append(subprocess.Popen([os.path.join(args.bin_dir, "hetps-server"),
                                       f"--scheduler={endpoint}", "--optimizer=sgd:lr=1e-9"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        sizes = [int(float(m) * (1 << 20)) // 4 for m in args.mb.split(",")]
        if args.device == "cuda":
            device_bench(endpoint, sizes, args)
            return
        with hetps.Client(endpoint) as client:
            client.declare([(f"t{i}", (n,), 0) for i, n in enumerate(sizes)])
            for i, n in enumerate(sizes):
                array = np.ones(n, np.float32)
                for op in ("push", "pull"):
                    python_loop(client, op, f"t{i}", array, args.seconds / 4)  # warm up
                    py, cpp = [], []
                    for _ in range(args.rounds):
                        for rates, loop in ((py, python_loop), (cpp, None)):
                            if loop:
                                ops, secs = loop(client, op, f"t{i}", array, args.seconds)
                            else:
                                ops, secs = client._native_loop(op, f"t{i}", array, args.seconds)
                            rates.append(ops * n * 4 / secs / 1e9)
                    py_gbps, cpp_gbps = statistics.median(py), statistics.median(cpp)
                    print(json.dumps({"bench": "python_pushpull", "mb": n * 4 / (1 << 20),
                                      "op": op, "python_gbps": round(py_gbps, 3),
                                      "cpp_gbps": round(cpp_gbps, 3),
                                      "python_vs_cpp": round(py_gbps / cpp_gbps, 3)}),
                          flush=True)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def copy_loop(dst, src, seconds):
    """The reference: plain copies of src into dst (device and pinned host memory), each
    synchronized as a waited push or pull is."""
    import torch
    ops, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        ops += 1
    return ops, time.perf_counter() - start


def device_bench(endpoint, sizes, args):
    import torch
    codecs = {0: "none", 1: args.device_codec}
    spec = f"default=none;layer1={args.device_codec}"
    with hetps.Client(endpoint, push_codec=spec) as client:
        client.declare([(f"t{i}.{layer}", (n,), layer) for i, n in enumerate(sizes)
                        for layer in codecs])
        for i, n in enumerate(sizes):
            device = torch.ones(n, device="cuda")
            pinned = torch.empty(n, pin_memory=True)
            host = np.ones(n, np.float32)
            for op, layer in (("push", 0), ("push", 1), ("pull", 0)):
                name = f"t{i}.{layer}"
                copy = (lambda s: copy_loop(pinned, device, s)) if op == "push" else \
                    (lambda s: copy_loop(device, pinned, s))
                loops = {"device": lambda s: python_loop(client, op, name, device, s),
                         "copy": copy,
                         "host": lambda s: python_loop(client, op, name, host, s)}
                for loop in loops.values():
                    loop(args.seconds / 4)  # warm up
                rates = {k: [] for k in loops}
                for _ in range(args.rounds):
                    for k, loop in loops.items():
                        ops, secs = loop(args.seconds)
                        rates[k].append(ops * n * 4 / secs / 1e9)
                gbps = {k: statistics.median(v) for k, v in rates.items()}
                print(json.dumps({"bench": "python_pushpull_cuda", "mb": n * 4 / (1 << 20),
                                  "op": op, "codec": codecs[layer] if op == "push" else "none",
                                  "device_gbps": round(gbps["device"], 3),
                                  "copy_gbps": round(gbps["copy"], 3),
                                  "host_gbps": round(gbps["host"], 3),
                                  "device_vs_copy": round(gbps["device"] / gbps["copy"], 3),
                                  "device_vs_host": round(gbps["device"] / gbps["host"], 3),
                                  "gpu": torch.cuda.get_device_name(0)}), flush=True)
        stats = client.stats()
        print(json.dumps({"bench": "python_pushpull_cuda_stats",
                          **{k: v for k, v in stats.items() if k.startswith("device_")}}),
              flush=True)


if __name__ == "__main__":
    main()
