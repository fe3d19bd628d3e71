"""CUDA tensors through hetps.Client and hetps.torch: pushes encoded on the device equal the CPU
path's exactly with every GPU codec, pulls land on the device, a GPU model trains as the CPU
one does, and two worker processes take the GPUs their local ranks name. Skipped (visibly)
where torch sees no GPU; tests/gpu/check.sh runs them on a GPU machine, where none may skip."""
import os
import re
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import hetps  # noqa: E402
import hetps.torch  # noqa: E402

from conftest import BIN  # noqa: E402

GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a GPU (torch sees none)")
SUM = ["--optimizer=sgd:lr=1", "--init=zeros"]  # a value is minus the sum of its pushes
# The codecs with CUDA twins (worker/compress/gpu_codec.h), error feedback on where it exists.
CODECS = ["none", "fp16", "topk:density=0.01,ef=1", "randomk:density=0.01,ef=1",
          "qsgd:levels=16", "onebit", "efsign", "terngrad", "dgc:density=0.01"]


def test_device_arrays_are_refused_clearly_without_a_gpu(cluster):
    """An array claiming device memory where this module cannot use it: a clear error."""
    if GPU:
        pytest.skip("this machine has a GPU: the refusal is for machines without one")

    class FakeDeviceArray:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (4096, False),
                                    "version": 3}

    c = cluster(server_flags=SUM)
    with hetps.Client(c.endpoint) as w:
        w.declare([("w", (4,), 0)])
        with pytest.raises(hetps.InvalidArgument, match="device memory"):
            w.push("w", FakeDeviceArray())


@needs_gpu
@pytest.mark.parametrize("codec", CODECS)
def test_a_cuda_push_equals_the_cpu_push_exactly(cluster, codec):
    """Worker 0 pushes g from the CPU, worker 1 the same g from the GPU, at the same clock (the
    same codec randomness): the second push must be bit for bit the first (v2 == 2 v1), and a
    pull into a CUDA tensor must equal the one into host memory."""
    c = cluster(workers=2, server_flags=SUM)
    n = 300_001  # several partitions over both servers
    g = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    barrier = threading.Barrier(2)
    results, errors = {}, []

    def worker(rank):
        try:
            with hetps.Client(c.endpoint, rank=rank, push_codec=codec) as w:
                w.declare([("w", (n,), 0)])
                values = []
                for turn in range(2):
                    if turn == rank:
                        grad = torch.from_numpy(g) if rank == 0 else torch.from_numpy(g).cuda()
                        w.push("w", grad).wait()
                    barrier.wait(timeout=60)
                    w.barrier()
                    out = np.empty(n, np.float32) if rank == 0 else torch.empty(n, device="cuda")
                    w.pull("w", out).wait()
                    values.append(out if rank == 0 else out.cpu().numpy())
                    barrier.wait(timeout=60)
                results[rank] = (values, w.stats())
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    (v1, v2), _ = results[0]
    (d1, d2), stats = results[1]
    np.testing.assert_array_equal(d1, v1)  # pulled onto the GPU: the same values
    np.testing.assert_array_equal(d2, v2)
    np.testing.assert_array_equal(v2, 2 * v1)  # the GPU's push decoded to the CPU's exactly
    if codec == "none":
        np.testing.assert_array_equal(v1, -g)
        assert stats["device_raw_bytes"] == 4 * n
    else:
        assert stats["device_encoded_partitions"] > 0 and stats["device_raw_bytes"] == 0
        assert stats["device_encoded_bytes"] == stats["bytes_pushed"]
    assert stats["device_pulled_bytes"] == 2 * 4 * n


@needs_gpu
def test_many_tensors_in_one_call_from_the_gpu_and_mixed_devices_refused(cluster):
    c = cluster(server_flags=SUM)
    with hetps.Client(c.endpoint) as w:
        w.declare([("a", (1000,), 0), ("b", (3, 5), 1)])
        a, b = torch.arange(1000.0, device="cuda"), torch.ones(3, 5, device="cuda")
        w.push_all({"a": a, "b": b}).wait()
        out = {"a": torch.empty(1000, device="cuda"), "b": torch.empty(3, 5, device="cuda")}
        w.pull_all(out).wait()
        assert torch.equal(out["a"], -a) and torch.equal(out["b"], -b)
        with pytest.raises(hetps.InvalidArgument, match="one device"):
            w.push_all({"a": a, "b": torch.ones(3, 5)})
        with pytest.raises(hetps.InvalidArgument, match="float32"):
            w.push("a", torch.ones(1000, device="cuda", dtype=torch.float64))


def train(endpoint, device, steps, codec="none"):
    """Steps of a seeded MLP through hetps on `device`; the parameters after each step."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 5)).to(device)
    gen = torch.Generator().manual_seed(11)
    with hetps.Client(endpoint, push_codec=codec) as client:
        opt = hetps.torch.DistributedOptimizer(model, client, weight=1.0)
        seen = []
        for _ in range(steps):
            x = torch.randn(32, 20, generator=gen).to(device)
            y = torch.randint(0, 5, (32,), generator=gen).to(device)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.synchronize()
            seen.append([p.detach().cpu().clone() for p in model.parameters()])
        opt.close()
        stats = client.stats()
    return seen, stats


@needs_gpu
def test_distributed_optimizer_on_a_gpu_model_matches_the_cpu_run(cluster):
    flags = ["--optimizer=sgd:lr=0.1", "--init=worker"]
    cpu, _ = train(cluster(server_flags=flags).endpoint, "cpu", 20)
    gpu, stats = train(cluster(server_flags=flags).endpoint, "cuda", 20)
    worst = max(float((a - b).abs().max()) for step_c, step_g in zip(cpu, gpu)
                for a, b in zip(step_c, step_g))
    print(f"\nGPU model against the CPU model over 20 steps: largest difference {worst:.2e}")
    assert worst <= 1e-4
    assert stats["device_pushes"] > 0 and stats["device_pulls"] > 0
    _, coded = train(cluster(server_flags=flags).endpoint, "cuda", 5, "topk:density=0.1,ef=1")
    assert coded["device_encoded_partitions"] > 0


@needs_gpu
def test_two_worker_processes_take_the_gpus_of_their_local_ranks(tmp_path):
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "pytorch",
                           "train_fashion_mnist.py")
    out = subprocess.run(
        [os.path.join(BIN, "hetps"), "launch", "--servers=2", "--workers=2",
         f"--run_dir={tmp_path}", f"--worker_cmd={sys.executable} {example}",
         "--consistency=bsp", "--optimizer=sgd:lr=0.1", "--init=worker", "--device=cuda",
         "--codec=topk:density=0.01,ef=1", "--iterations=300", "--eval_every=300",
         "--progress_every=300"],
        capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    count = torch.cuda.device_count()
    for rank in range(2):
        assert f"local rank {rank} takes GPU {rank % count} of the {count} visible" in out.stdout
        assert re.search(rf"rank {rank} on cuda:{rank % count}: [1-9]\d* partitions encoded",
                         out.stdout), out.stdout
    final = re.search(r"\[worker 0\] final test accuracy ([0-9.]+)", out.stdout)
    assert final and float(final.group(1)) > 0.6, out.stdout
    print(f"\ntwo GPU workers (topk 1%, 300 steps): final accuracy {final.group(1)}")
