#!/usr/bin/env python3
"""Federated clients in Python against the C++ edge client, on one scenario, in one run.

    PYTHONPATH=build/python /usr/bin/python3 bench/fed_clients.py --bin_dir build/bin

Runs `hetps fed run --flagfile=SCENARIO --algorithm=ALGORITHM` once with the C++ clients
(hetps-worker --workload=edge) and once with a Python client program (default
examples/federated/torch_client.py, the same model in PyTorch) hosted --per_process clients to a
process. While each runs it samples, every --sample_s, the proportional set size (PSS: shared
pages split among the processes that share them) of every client process, summed; it reports
the peak, per client, and the time per aggregation (the rounds log's last wall time over its
aggregations). One JSON line per kind of client, then one with the ratios python / C++.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass  # gone
    return 0


def client_pids(marker):
    """The processes whose command line holds `marker` (the client program; not the hetps fed
    and hetps launch that name it in their arguments)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(marker.encode() in a for a in argv) and argv[1:2] not in ([b"fed"], [b"launch"]):
            pids.append(int(entry))
    return pids


def run(args, label, extra, marker, run_dir):
    argv = [os.path.join(args.bin_dir, "hetps"), "fed", "run", f"--flagfile={args.scenario}",
            f"--algorithm={args.algorithm}", f"--run_dir={run_dir}", *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak_kib, peak_processes = 0, 0
    while proc.poll() is None:
        pids = client_pids(marker)
        total = sum(pss_kib(p) for p in pids)
        if total > peak_kib:
            peak_kib, peak_processes = total, len(pids)
        time.sleep(args.sample_s)
    output = proc.communicate()[0]
    if proc.returncode != 0:
        sys.exit(f"{label}: hetps fed run failed:\n{output}")
    with open(os.path.join(run_dir, "rounds.csv")) as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    aggregations = int(last["aggregation"])
    return {"bench": "fed_clients", "clients": label, "scenario": os.path.basename(args.scenario),
            "algorithm": args.algorithm, "processes": peak_processes,
            "pss_mib": round(peak_kib / 1024, 1),
            "pss_mib_per_client": round(peak_kib / 1024 / args.clients, 2),
            "aggregations": aggregations, "wall_s": float(last["wall_s"]),
            "s_per_aggregation": round(float(last["wall_s"]) / aggregations, 3),
            "final_accuracy": float(last["test_accuracy"] or "nan")}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin_dir", default=os.path.join(ROOT, "build/bin"))
    p.add_argument("--scenario", default=os.path.join(ROOT, "deploy/edge/hetero100.flags"))
    p.add_argument("--algorithm", default="fedavg")
    p.add_argument("--clients", type=int, default=100, help="the scenario's --clients")
    p.add_argument("--client_cmd",
                   default=f"{sys.executable} {os.path.join(ROOT, 'examples/federated/torch_client.py')}")
    p.add_argument("--per_process", type=int, default=26, help="Python clients per process")
    p.add_argument("--uploads", type=int, default=0, help="override the scenario's (0: keep)")
    p.add_argument("--sample_s", type=float, default=0.5)
    args = p.parse_args()
    shared = [f"--clients={args.clients}"]
    if args.uploads:
        shared.append(f"--uploads={args.uploads}")
    with tempfile.TemporaryDirectory(prefix="hetps-fed-clients-") as tmp:
        cpp = run(args, "cpp", shared, os.path.join(args.bin_dir, "hetps-worker"),
                  os.path.join(tmp, "cpp"))
        print(json.dumps(cpp), flush=True)
        program = args.client_cmd.split()[-1]
        python = run(args, "python", shared + [f"--client_cmd={args.client_cmd}",
                                               f"--clients_per_process={args.per_process}"],
                     program, os.path.join(tmp, "python"))
        python["per_process"] = args.per_process
        print(json.dumps(python), flush=True)
        print(json.dumps({
            "bench": "fed_clients", "clients": "python/cpp",
            "pss_ratio": round(python["pss_mib"] / max(cpp["pss_mib"], 1e-9), 2),
            "s_per_aggregation_ratio": round(
                python["s_per_aggregation"] / max(cpp["s_per_aggregation"], 1e-9), 2)}))


if __name__ == "__main__":
    main()
