#!/usr/bin/env python3
"""Push and pull throughput from Python against the C++ client, in one run.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_pushpull.py --bin_dir build/bin

Starts a scheduler and one server on loopback and one hetps.Client. For each size, push and pull
of one tensor, each waited, are timed from Python (client.push(...).wait() in a loop) and from
C++ through the same client and connection (client._native_loop: the same calls in a C++ loop),
alternating --rounds times; the ratio python / C++ is the module's overhead. One JSON line per
size and operation: medians over the rounds.
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
    args = p.parse_args()

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


if __name__ == "__main__":
    main()
