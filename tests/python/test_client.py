"""hetps.Client against a live local cluster: exact sums, no copies, errors, lifetimes."""
import gc
import re
import threading
import time
import weakref

import numpy as np
import pytest

import hetps

SUM = ["--optimizer=sgd:lr=1", "--init=zeros"]  # a value is minus the sum of its pushes


@pytest.mark.parametrize("placement", ["host-local", "switch"])
def test_python_workers_push_and_read_through_the_aggregator_exactly(cluster, placement):
    """The aggregation tier (docs/aggregation-tier.md) under bsp: each clock's pushes of both
    workers reach the servers as one sum per partition, and every pull reads exactly the model
    after the clocks so far; as whole pushes summed in float (host-local), or streamed as
    fixed-point chunks through the switch emulation's slots (these integers are exact there)."""
    switch = ["--switch_chunk=4096", "--switch_slots=4", "--switch_clip=16"]
    c = cluster(workers=2, servers=1, server_flags=[*SUM, "--consistency=bsp"], aggregators=1,
                aggregator_flags=["--window_ms=20000", *(switch if placement == "switch" else [])])
    n = 300_001
    errors = []

    def worker(rank):
        try:
            with hetps.Client(c.endpoint, rank=rank) as w:
                w.declare([("w", (n,), 0)])
                out = np.empty(n, np.float32)
                for t in range(3):
                    w.push("w", np.full(n, (rank + 1) * (t + 1), np.float32)).wait()
                    w.clock()
                    w.pull("w", out).wait()
                    want = -3 * sum(range(1, t + 2))  # both workers, every clock so far
                    np.testing.assert_array_equal(out, np.full(n, want, np.float32))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    c.stop()
    summed = re.search(r"stopped: (\d+) pushes summed into (\d+) sums", c.log(2))
    assert summed, c.log(2)
    assert int(summed.group(1)) == 2 * int(summed.group(2)) > 0, summed.group(0)
    if placement == "switch":  # 74 chunks of the 300001 elements per clock, 3 clocks
        assert "switch: 222 chunks summed" in c.log(2), c.log(2)


def test_pushes_of_two_workers_sum_exactly(cluster):
    c = cluster(workers=2, server_flags=SUM)
    n = 300_001  # several partitions over both servers
    results = {}

    def worker(rank):
        # Rank 0 reaches the servers through shared memory and batches its small requests (the
        # default), rank 1 sends one message per request over TCP.
        with hetps.Client(c.endpoint, rank=rank, transport="shm" if rank == 0 else "socket",
                          batch_bytes=(256 << 10) * (1 - rank)) as w:
            w.declare([("w", (n,), 0), ("b", (7,), 1)])
            grads = [np.full(n, rank + 1, np.float32), np.arange(n, dtype=np.float32)]
            hetps.wait_all([w.push("w", g) for g in grads])
            w.push("b", np.ones(7, np.float32)).wait()
            w.clock()
            w.barrier()
            out = np.empty(n, np.float32)
            w.pull("w", out).wait()
            b = np.empty(7, np.float32)
            w.pull("b", b).wait()
            results[rank] = (out, b, w.stats(), w.num_workers, w.num_servers, rank)

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == [0, 1]
    expected = -(1 + 2 + 2 * np.arange(n, dtype=np.float64))
    for out, b, stats, workers, servers, rank in results.values():
        np.testing.assert_array_equal(out, expected.astype(np.float32))
        np.testing.assert_array_equal(b, np.full(7, -2, np.float32))
        assert (workers, servers) == (2, 2)
        assert stats["bytes_pushed"] == 4 * (2 * n + 7)
        assert stats["bytes_pulled"] == 4 * (n + 7)
        moved = stats["bytes_pushed"] + stats["bytes_pulled"]
        assert stats["shared_memory_bytes"] == (moved if rank == 0 else 0)
        if rank == 0:
            assert 0 < stats["messages"] <= stats["requests"]
        else:
            assert stats["messages"] == stats["requests"]


def test_numpy_and_torch_arrays_cross_without_copies(cluster):
    torch = pytest.importorskip("torch")
    c = cluster(server_flags=SUM)
    with hetps.Client(c.endpoint) as w:
        w.declare([("a", (1000,), 0), ("t", (10, 100), 0)])
        a = np.arange(1000, dtype=np.float32)
        t = w.push("a", a)
        assert t.data_ptr == a.ctypes.data  # sent from the array's own memory
        t.wait()
        out = np.zeros(1000, np.float32)
        t = w.pull("a", out)
        assert t.data_ptr == out.ctypes.data  # written into it
        t.wait()
        np.testing.assert_array_equal(out, -a)

        g = torch.ones(10, 100, requires_grad=False)
        t = w.push("t", g)
        assert t.data_ptr == g.data_ptr()
        t.wait()
        p = torch.zeros(10, 100, requires_grad=True)  # a parameter: written in place
        t = w.pull("t", p)
        assert t.data_ptr == p.data_ptr()
        t.wait()
        assert torch.equal(p.detach(), -torch.ones(10, 100))


def test_errors_raise_their_family_with_code_and_message(cluster):
    c = cluster(server_flags=SUM)
    with hetps.Client(c.endpoint) as w:
        w.declare([("a", (100,), 0)])
        with pytest.raises(hetps.NotFound) as e:
            w.push("nope", np.ones(100, np.float32)).wait()
        assert e.value.code == "NOT_FOUND" and "nope" in e.value.message
        with pytest.raises(hetps.InvalidArgument) as e:
            w.push("a", np.ones(99, np.float32)).wait()
        assert e.value.code == "SIZE_MISMATCH"
        assert isinstance(e.value, ValueError) and isinstance(e.value, hetps.Error)
        with pytest.raises(hetps.InvalidArgument) as e:
            w.push("a", np.ones(100, np.float64))
        assert e.value.code == "DTYPE_MISMATCH"
        with pytest.raises(hetps.InvalidArgument):
            w.push("a", np.ones(200, np.float32)[::2])  # not contiguous
        with pytest.raises(hetps.InvalidArgument):
            w.pull("a", np.frombuffer(bytes(400), np.float32))  # read-only memory
        with pytest.raises(hetps.FailedPrecondition, match="already declared"):
            w.declare([("a", (101,), 0)])
        w.push("a", np.ones(100, np.float32)).wait()  # still serving
    with pytest.raises(hetps.FailedPrecondition):
        w.clock()  # finished
    with pytest.raises(hetps.DeadlineExceeded):
        hetps.Client("tcp://127.0.0.1:1", join_timeout_ms=300)


def test_many_tensors_in_one_call(cluster):
    c = cluster(server_flags=SUM)
    with hetps.Client(c.endpoint) as w:
        shapes = {f"t{i}": (10 + i,) for i in range(30)}
        w.declare([(name, shape, i % 3) for i, (name, shape) in enumerate(shapes.items())])
        grads = {name: np.full(shape, i + 1, np.float32)
                 for i, (name, shape) in enumerate(shapes.items())}
        before = w.stats()
        w.push_all(grads).wait()  # a dict
        w.push_all(list(grads.items()), weight=2.0).wait()  # (name, array) pairs
        outs = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
        t = w.pull_all(outs)
        assert t.data_ptr == outs["t0"].ctypes.data
        t.wait()
        for i, name in enumerate(shapes):
            np.testing.assert_array_equal(outs[name], np.full(shapes[name], -2 * (i + 1)))
        after = w.stats()
        assert after["requests"] - before["requests"] == 90
        assert after["messages"] - before["messages"] < 90  # small requests share messages
        # One bad entry fails the call and sends nothing.
        with pytest.raises(hetps.NotFound):
            w.pull_all({"t0": outs["t0"], "nope": outs["t1"]}).wait()
        with pytest.raises(hetps.InvalidArgument) as e:
            w.push_all([("t0", np.ones(3, np.float32))]).wait()
        assert e.value.code == "SIZE_MISMATCH"
        with pytest.raises(hetps.InvalidArgument):
            w.push_all([("t0",)])
        with pytest.raises(hetps.InvalidArgument):
            w.push_all({"t0": np.ones(10, np.float64)})
        assert w.stats()["requests"] == after["requests"]
        w.pull_all([]).wait()  # nothing to do


@pytest.mark.parametrize("transport", ["auto", "cma"])
def test_a_ticket_keeps_its_array_alive_until_done(cluster, transport):
    # Through cross memory attach the server itself reads the array: it is lent until answered.
    c = cluster(server_flags=SUM)
    with hetps.Client(c.endpoint, transport=transport) as w:
        n = 4_000_000
        w.declare([("big", (n,), 0)])
        a = np.ones(n, np.float32)
        alive = weakref.ref(a)
        t = w.push("big", a)
        del a
        gc.collect()
        assert alive() is not None or t.done()  # held while in flight
        t.wait()
        del t
        assert w.pending == 0  # released once done
        gc.collect()
        assert alive() is None

        # A dropped ticket: hetps still holds the array until the push is done.
        b = np.full(n, 2, np.float32)
        alive = weakref.ref(b)
        w.push("big", b)
        del b
        gc.collect()
        assert alive() is not None or w.pending == 0
        deadline = time.time() + 30
        while w.pending and time.time() < deadline:
            time.sleep(0.01)
        assert w.pending == 0
        gc.collect()
        assert alive() is None
        out = np.empty(n, np.float32)
        w.pull("big", out).wait()
        np.testing.assert_array_equal(out, np.full(n, -3, np.float32))
        if transport == "cma":
            assert w.stats()["shared_memory_bytes"] == 3 * 4 * n  # two pushes and the pull


def test_clock_metrics_and_help(cluster):
    c = cluster(server_flags=SUM)
    with hetps.Client(c.endpoint, push_codec="topk:density=0.1,ef=1") as w:
        w.declare([("a", (10000,), 0)])
        g = np.random.default_rng(1).standard_normal(10000).astype(np.float32)
        for _ in range(3):
            w.begin_iteration()
            w.push("a", g).wait()
            w.clock()
            w.report_metrics({"loss": 1.5})
        assert w.current_clock == 3
        s = w.stats()
        assert s["raw_bytes_pushed"] == 3 * 40000
        assert s["bytes_pushed"] < s["raw_bytes_pushed"] / 3  # compressed
    assert "Registers with the scheduler" in hetps.Client.__init__.__doc__
    assert "lifetime" in hetps.Client.__doc__ or "must not be modified" in hetps.Client.__doc__


def test_python_and_cpp_workers_share_one_cluster(cluster):
    """A hetps-worker (the synthetic workload) and a Python worker in one BSP cluster: each
    waits for the other's clocks, and both finish."""
    import os
    import subprocess

    from conftest import BIN

    c = cluster(workers=2, server_flags=["--consistency=bsp", "--optimizer=sgd:lr=0.1"])
    cpp = subprocess.Popen([os.path.join(BIN, "hetps-worker"), f"--scheduler={c.endpoint}",
                            "--workload=synthetic", "--iterations=20", "--tensor_elements=1000"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with hetps.Client(c.endpoint) as w:
        w.declare([("py", (100,), 0)])  # the shard map holds the union of both declarations
        value = np.empty(100, np.float32)
        for _ in range(20):
            w.pull("py", value).wait()
            w.push("py", np.ones(100, np.float32)).wait()
            w.clock()
        w.barrier()
        assert w.stats()["max_staleness"] == 0  # bsp: never ahead of the C++ worker
    out, _ = cpp.communicate(timeout=60)
    assert cpp.returncode == 0, out
    assert "iter 20/20" in out, out


def test_a_client_dropped_without_finish_leaves_after_its_transfers(cluster):
    c = cluster(server_flags=SUM)
    w = hetps.Client(c.endpoint)
    w.declare([("x", (4_000_000,), 0)])
    a = np.ones(4_000_000, np.float32)
    alive = weakref.ref(a)
    w.push("x", a)  # in flight when the client goes
    del a
    del w
    gc.collect()
    assert alive() is None  # released only after the client finished its transfers


def test_finish_while_other_threads_are_inside_calls(cluster):
    """finish() while threads push, pull and clock with the GIL released: each of their calls
    ends (done, or FailedPrecondition once finished), none touches a freed client. Three
    clusters, as a finished run's last worker shuts its cluster down."""
    for _ in range(3):
        c = cluster(server_flags=SUM)
        w = hetps.Client(c.endpoint)
        w.declare([("a", (200000,), 0)])
        started = threading.Barrier(4)
        outcomes, raced, errors = [], [], []

        def work(kind):
            buf = np.ones(200000, np.float32)
            started.wait()
            try:
                while True:
                    if kind == "push":
                        w.push("a", buf).wait()
                    elif kind == "pull":
                        w.pull("a", buf).wait()
                    else:
                        w.clock()
            except hetps.FailedPrecondition:
                outcomes.append(kind)  # a call after finish()
            except hetps.Error as e:  # a call that raced the stop: any clear error ends it
                raced.append(f"{kind}: {e.code}")
                outcomes.append(kind)
            except BaseException as e:  # anything else is a defect
                errors.append(f"{kind}: {type(e).__name__} {e}")
                outcomes.append(kind)

        threads = [threading.Thread(target=work, args=(k,)) for k in ("push", "pull", "clock")]
        for t in threads:
            t.start()
        started.wait()
        time.sleep(0.2)
        w.finish()
        for t in threads:
            t.join(timeout=30)
            assert not t.is_alive(), "a call did not end after finish()"
        assert sorted(outcomes) == ["clock", "pull", "push"] and not errors, errors
        with pytest.raises(hetps.FailedPrecondition):
            w.push("a", np.ones(200000, np.float32))
        del w


def test_a_copy_built_from_exports_holds_the_tables_rows(cluster, tmp_path):
    import os
    import subprocess

    from conftest import BIN
    from hetps.tables import TableCopy

    c = cluster(workers=1, server_flags=SUM)

    def export(name, *flags):
        subprocess.run([os.path.join(BIN, "hetps"), "ctl", f"--scheduler={c.endpoint}",
                        "export", "--table=emb", f"--out={tmp_path / name}", *flags],
                       check=True, capture_output=True)
        return str(tmp_path / name)

    with hetps.Client(c.endpoint) as w:
        w.declare_table("emb", 4, init="zeros", max_rows=32, eviction="lfu")
        w.declare([])
        keys = np.arange(20, dtype=np.int64)
        w.push_rows("emb", keys, np.ones((20, 4), np.float32)).wait()
        copy = TableCopy()
        assert copy.apply(export("1"))["rows"] == "20"
        assert sorted(copy.rows) == list(range(20))
        np.testing.assert_array_equal(copy.rows[7], -np.ones(4, np.float32))
        more = np.arange(1000, 1200, dtype=np.int64)  # past the cap: lfu drops rows
        w.push_rows("emb", more, np.full((200, 4), 2, np.float32)).wait()
        delta = copy.apply(export("2"))
        assert int(delta["tombstones"]) > 0
        full = TableCopy()
        full.apply(export("3", "--full"))
        assert len(full) == len(copy) <= 64
        assert full.rows.keys() == copy.rows.keys()
        held = np.array(sorted(copy.rows), np.uint64)
        out = np.empty((len(held), 4), np.float32)
        w.pull_rows("emb", held, out).wait()
        for key, row in zip(held.tolist(), out):
            np.testing.assert_array_equal(copy.rows[key], row)
            np.testing.assert_array_equal(full.rows[key], row)


def test_table_rows_sum_exactly_and_bad_arrays_raise(cluster):
    c = cluster(workers=1, server_flags=SUM)
    with hetps.Client(c.endpoint) as w:
        w.declare_table("emb", 4, init="zeros")
        w.declare([])
        keys = np.array([3, 1 << 40, 3, 7], np.int64)  # 3 repeated: its rows are summed
        grads = np.arange(16, dtype=np.float32).reshape(4, 4)
        w.push_rows("emb", keys, grads).wait()
        out = np.empty((4, 4), np.float32)
        w.pull_rows("emb", keys, out).wait()
        want = -grads.copy()
        want[0] = want[2] = -(grads[0] + grads[2])
        np.testing.assert_array_equal(out, want)
        unsigned = np.array([1 << 63], np.uint64)  # any 64-bit id
        row = np.empty((1, 4), np.float32)
        w.pull_rows("emb", unsigned, row).wait()
        np.testing.assert_array_equal(row, np.zeros((1, 4), np.float32))
        with pytest.raises(hetps.InvalidArgument, match="need 16 floats"):
            w.pull_rows("emb", keys, np.empty((3, 4), np.float32))
        with pytest.raises(hetps.InvalidArgument, match="int64 or uint64"):
            w.push_rows("emb", keys.astype(np.int32), grads)
        with pytest.raises(hetps.NotFound):
            w.push_rows("nope", keys, grads).wait()


def test_a_worker_joins_only_a_scheduler_on_its_own_clock(cluster):
    virtual = cluster(scheduler_flags=["--clock=virtual"])
    with pytest.raises(hetps.FailedPrecondition, match="runs virtual time.*hetps.torch"):
        hetps.Client(virtual.endpoint, join_timeout_ms=5000)
    wall = cluster()
    with pytest.raises(hetps.FailedPrecondition, match="start the scheduler with --clock=virtual"):
        hetps.Client(wall.endpoint, join_timeout_ms=5000, virtual_clock=True)
    with hetps.Client(wall.endpoint) as w:  # the refused ones took no place
        assert w.rank == 0
