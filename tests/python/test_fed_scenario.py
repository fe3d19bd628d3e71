"""Python federated clients under a scenario: the C++ clients' emulation (links, devices, data
partitions, layer schedule) from the same flags; hetps fed run --client_cmd with one client per
process and pooled; a client killed mid-round; a run mixing C++ and Python clients."""
import csv
import glob
import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import hetps
import hetps.fed
from hetps.scenario import Scenario, parse_flags

BIN = os.environ.get("HETPS_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
PROGRAM = os.path.join(os.path.dirname(__file__), "fed_program.py")
# The scenario's client flags (hetps-worker's), then hetps fed's options and the servers' flag.
CLIENT_ARGS = ["--workload=edge", "--evaluators=1", "--partition=dirichlet",
               "--dirichlet_alpha=0.5", "--data_seed=3", "--local_epochs=2", "--device_spread=0.5",
               "--link_up_mbps=200", "--link_down_mbps=400", "--link_latency_ms=5",
               "--link_spread=0.5", "--link_seed=2"]
CLIENT_FLAGS = parse_flags(CLIENT_ARGS)
SCENARIO = CLIENT_ARGS + ["--clients=6", "--parallel=3", "--per_round=3", "--uploads=9",
                          "--eval_uploads=3", "--target=0.5", "--init=worker"]


def test_a_python_client_gets_the_link_hetps_worker_draws_for_its_rank():
    printed = subprocess.run(
        [os.path.join(BIN, "hetps-worker"), "--rank=0", "--print_links=6", *CLIENT_ARGS],
        capture_output=True, text=True, check=True).stdout.split("\n")
    for line in (p for p in printed if len(p.split()) == 8):
        rank, up, down, latency, jitter, loss, rto, seed = line.split()
        link = Scenario(CLIENT_FLAGS, int(rank)).link
        assert (link.up_mbps, link.down_mbps, link.latency_ms, link.jitter_ms, link.loss,
                link.rto_ms, link.seed) == (float(up), float(down), float(latency),
                                            float(jitter), float(loss), float(rto), int(seed))
    evaluator = Scenario(CLIENT_FLAGS, 0)
    assert evaluator.evaluator and not evaluator.link.enabled and evaluator.slowdown == 1
    assert all(Scenario(CLIENT_FLAGS, r).slowdown >= 1 for r in range(1, 7))


PHONES = os.path.join(os.path.dirname(__file__), "../../deploy/edge/devices/phones.csv")


def test_a_python_client_computes_at_the_rate_it_drew_from_the_device_table():
    flags = dict(CLIENT_FLAGS, device_table=PHONES, device_spread="0", evaluators="1")
    rates = []
    for rank in range(1, 30):
        s = Scenario(flags, rank)
        assert s.device_kind == "snapdragon8-cpu" and s.device_gflops == 30  # the fastest
        rates.append(s.device_gflops / s.slowdown)  # what its virtual compute runs at
    assert all(15 <= r <= 30 for r in rates) and len(set(rates)) == len(rates)
    assert Scenario(flags, 0).device_kind == "" and Scenario(flags, 0).slowdown == 1
    assert [Scenario(flags, r).slowdown for r in range(1, 30)] == \
        [Scenario(flags, r).slowdown for r in range(1, 30)]  # the same draw every time
    with pytest.raises(hetps.NotFound, match="cannot read the device table /nonexistent.csv"):
        Scenario(dict(flags, device_table="/nonexistent.csv"), 1)


def test_a_python_client_clips_and_noises_its_update_as_dp_says():
    from hetps.fed import _Run
    deltas = {"a": np.full(3, 3.0, np.float32), "b": np.full(16, 1.0, np.float32)}  # norm 6.56
    for spec, noisy in (("central:clip=2,noise=1", False), ("local:clip=2,noise=1", True)):
        s = Scenario(dict(CLIENT_FLAGS, dp=spec), 1)
        run = _Run(None, None, s, print)
        out = run.private(deltas)
        norm = np.sqrt(sum(float(np.sum(np.square(d))) for d in out.values()))
        if not noisy:
            assert norm == pytest.approx(2.0, rel=1e-6)  # scaled onto the clip norm
            assert out["a"][0] / out["b"][0] == pytest.approx(3.0)  # in the same direction
        else:
            assert norm > 2.0  # std 2 on each of 19 values
    run = _Run(None, None, Scenario(dict(CLIENT_FLAGS, dp="central:clip=2,noise=1,quantile=0.5"),
                                    1), print)
    out = run.private(deltas, round_clip=7.0)  # adaptive clipping: the round's clip; the bit
    assert run.clip_bit == {"within_clip": True} and out["a"][0] == 3.0
    run.private(deltas, round_clip=6.5)
    assert run.clip_bit == {"within_clip": False}


    run = _Run(None, None, Scenario(dict(CLIENT_FLAGS, dp="distributed:clip=2,noise=1"), 1), print)
    with pytest.raises(RuntimeError, match="secure_aggregation"):
        run.private(deltas)  # its share of the noise needs the secure round's K
    big = {"a": np.zeros(20000, np.float32)}
    std = float(np.std(run.private(big, kept=16)["a"]))
    assert std == pytest.approx(2 / 4, rel=0.05)  # noise x clip / sqrt(K)
    assert Scenario(CLIENT_FLAGS, 1).dp == "none"
    with pytest.raises(hetps.InvalidArgument, match="clip"):
        Scenario(dict(CLIENT_FLAGS, dp="central:clip=0"), 1)


class _Task:  # what a round's task told the client under local or distributed adaptive clipping
    round_update_noise = 1.2
    round_count_noise = 0.5


class _Masks:  # stands for the secure round: the word is the value, to read it back
    def mask_count(self, value):
        return value


def test_adaptive_clipping_under_local_and_distributed_dp_noises_the_bit_as_the_task_says():
    from hetps.fed import _Run
    big = {"a": np.zeros(40000, np.float32)}  # norm 0: within any clip
    run = _Run(_Task(), None, Scenario(dict(CLIENT_FLAGS, dp="local:clip=2,noise=1,quantile=0.5"),
                                       1), print)
    out = run.private(big, round_clip=3.0)
    assert float(np.std(out["a"])) == pytest.approx(1.2 * 3.0, rel=0.05)  # z_u x the round's clip
    bits = []
    for _ in range(4000):
        run.private({"a": np.zeros(1, np.float32)}, round_clip=3.0)
        bits.append(run.clip_bit["within_noisy"])
    assert np.mean(bits) == pytest.approx(0.5, abs=0.03)  # centred +1/2, noise of std 0.5
    assert np.std(bits) == pytest.approx(0.5, rel=0.05)
    run.private({"a": np.full(1, 9.0, np.float32)}, round_clip=3.0)
    assert -0.5 - 4 * 0.5 < run.clip_bit["within_noisy"] < -0.5 + 4 * 0.5  # beyond: -1/2
    run = _Run(_Task(), None, Scenario(
        dict(CLIENT_FLAGS, dp="distributed:clip=2,noise=1,quantile=0.5"), 1), print)
    run.secure = _Masks()
    out = run.private(big, round_clip=3.0, kept=16)
    assert float(np.std(out["a"])) == pytest.approx(1.2 * 3.0 / 4, rel=0.05)  # a share of it
    words = []
    for _ in range(4000):
        run.private({"a": np.full(1, 9.0, np.float32)}, round_clip=3.0, kept=16)
        words.append(run.clip_bit["within_masked"])
    assert np.mean(words) == pytest.approx(-0.5, abs=0.01)  # beyond the clip: -1/2
    assert np.std(words) == pytest.approx(0.5 / 4, rel=0.05)  # sigma_b / sqrt(K)


def test_the_layer_schedule_sends_deep_layers_on_the_last_rounds_of_each_period():
    s = Scenario({"deep_from": "1", "deep_period": "15", "deep_rounds": "5"}, 1)
    assert all(s.uploads(0, r) for r in range(30))
    assert [r for r in range(30) if s.uploads(1, r)] == [0, 11, 12, 13, 14, 15, 26, 27, 28, 29]


@pytest.mark.parametrize("flags, message", [
    ({"link_up_mbps": "fast"}, "--link_up_mbps needs a number, got 'fast'"),
    ({"fail_fraction": "2"}, "--fail_fraction must be in [0, 1]"),
    ({"availability": "sometimes"}, "sometimes"),
    ({"links": "radio"}, "--links must be transport or netns"),
    ({"deep_from": "1", "deep_period": "3", "deep_rounds": "4"}, "deep_rounds <= deep_period"),
    ({"local_epochs": "many"}, "--local_epochs needs an integer"),
    ({"device_table": PHONES, "device_gflops": "50"}, "leave --device_gflops unset"),
])
def test_a_scenario_flag_that_cannot_be_right_is_named(flags, message):
    with pytest.raises(ValueError, match=None) as raised:
        Scenario(flags, 1)
    assert message in str(raised.value)


def test_an_argument_that_is_no_flag_is_refused():
    with pytest.raises(ValueError, match="'rounds' is not a flag"):
        parse_flags(["--model=mlp", "rounds"])


def fed_run(tmp_path, algorithm, *extra, env=None):
    scenario = tmp_path / "scenario.flags"
    scenario.write_text("\n".join(SCENARIO) + "\n")
    run_dir = tmp_path / algorithm
    done = subprocess.run(
        [os.path.join(BIN, "hetps"), "fed", "run", f"--flagfile={scenario}",
         f"--algorithm={algorithm}", f"--client_cmd={sys.executable} {PROGRAM}",
         f"--run_dir={run_dir}", *extra],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, **(env or {})))
    log = (run_dir / "launch.log").read_text() if (run_dir / "launch.log").exists() else ""
    return done, run_dir, log


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_a_pool_of_python_clients_runs_the_scenario_as_the_cpp_clients_would(tmp_path):
    done, run_dir, log = fed_run(tmp_path, "fedavg", "--clients_per_process=4")
    assert done.returncode == 0, done.stdout + done.stderr + log
    assert "tests/python/fed_program.py` (4 per process)" in done.stdout  # the report says so
    records = {r["rank"]: r for r in
               (json.load(open(p)) for p in glob.glob(str(run_dir / "client-*.json")))}
    assert sorted(records) == list(range(7))
    assert len({r["pid"] for r in records.values()}) == 2  # ranks 0-3 and 4-6
    # Every training client's share of the data, as split_samples splits it: all 600, once.
    samples = sorted(i for r in records.values() for i in r["samples"])
    assert samples == list(range(600)) and records[0]["samples"] == []
    assert records[1]["config"]["local_epochs"] == 2
    # The scheduler's view of each client is the one hetps-worker would have reported.
    for row in rows(run_dir / "clients.csv"):
        s = Scenario(CLIENT_FLAGS, int(row["rank"]))
        assert float(row["slowdown"]) == pytest.approx(s.slowdown, abs=1e-3)
        assert float(row["up_mbps"]) == pytest.approx(s.link.up_mbps, abs=1e-3)
        assert float(row["latency_ms"]) == s.link.latency_ms
    measured = rows(run_dir / "rounds.csv")
    assert [int(r["aggregation"]) for r in measured] == [1, 2, 3]
    assert all(r["test_accuracy"] for r in measured) and all(int(r["kept"]) == 3 for r in measured)


def test_python_clients_under_local_dp_are_accounted_for(tmp_path):
    done, run_dir, log = fed_run(tmp_path, "fedavg", "--dp=local:clip=1,noise=2")
    assert done.returncode == 0, done.stdout + done.stderr + log
    eps = [float(r["epsilon"]) for r in rows(run_dir / "rounds.csv")]
    assert len(eps) == 3 and eps[0] > 0 and eps == sorted(eps)  # composed round after round
    assert "epsilon" in done.stdout  # the report says what was spent


@pytest.mark.parametrize("mode", ["central", "local", "distributed"])
def test_python_clients_follow_adaptive_clipping(tmp_path, mode):
    # central: the bit in the clear; local: noised by each client (std 0.3 each, the count's
    # noise 0.17 of a fraction: a shrinking step would be 3 sigma); distributed: noised and
    # masked, summed under the secure rounds' masks.
    secure = ["--secure_aggregation=secagg+"] if mode == "distributed" else []
    done, run_dir, log = fed_run(
        tmp_path, "fedavg",
        f"--dp={mode}:clip=0.0001,noise=0.5,quantile=0.5,clip_lr=0.5,count_noise=0.3", *secure)
    assert done.returncode == 0, done.stdout + done.stderr + log
    clips = [float(r["clip"]) for r in rows(run_dir / "rounds.csv")]
    assert len(clips) == 3 and clips[0] == pytest.approx(1e-4)
    assert clips[2] > clips[1] > clips[0]  # every update above the clip: it grows
    assert "within clip" in log


def test_python_clients_take_part_in_secure_fedbuff_cohorts(tmp_path):
    # FedBuff's buffer under secure aggregation: cohorts of 2 granted together (4 slots: two
    # cohorts in flight), each a secure round that the servers unmask as one step.
    done, run_dir, log = fed_run(tmp_path, "fedbuff", "--secure_aggregation=secagg+",
                                 "--parallel=4", "--per_round=2")
    assert done.returncode == 0, done.stdout + done.stderr + log
    assert "cohort 1: 2 clients selected" in log and "uploads unmasked" in log
    assert "applies nothing" not in log
    kept = [int(r["kept"]) for r in rows(run_dir / "rounds.csv")]
    assert kept and all(k == 2 for k in kept)


def test_a_python_attacker_poisons_its_update_as_the_cpp_client_would():
    update = [np.full(3, 2.0, np.float32), np.full(2, -1.0, np.float32)]
    hetps.Attacker("scale:factor=30", 3, 4).poison_update(update)
    assert update[0].tolist() == [60.0] * 3 and update[1].tolist() == [-30.0] * 2
    hetps.Attacker("sign_flip:factor=1", 3, 4).poison_update(update)
    assert update[0].tolist() == [-60.0] * 3
    noise = [[np.zeros(4, np.float32)] for _ in range(3)]
    for arrays, rank in zip(noise, (4, 4, 5)):  # seeded by --data_seed and rank
        hetps.Attacker("gaussian:std=1", 3, rank).poison_update(arrays)
    assert noise[0][0].tolist() == noise[1][0].tolist() != noise[2][0].tolist()
    with pytest.raises(hetps.InvalidArgument):
        Scenario(dict(CLIENT_FLAGS, byzantine_fraction="0.5", attack="nonsense"), 1)


def test_a_label_flip_attacker_trains_on_the_labels_the_cpp_client_would():
    y = np.array([0, 3, 9, 4, 9], dtype=np.int64)
    flip = hetps.Attacker("label_flip", 3, 4)
    assert flip.changes_labels and not hetps.Attacker("scale:factor=2", 3, 4).changes_labels
    assert flip.poison_labels(y, 10).tolist() == [9, 6, 0, 5, 0]
    assert hetps.Attacker("gaussian:std=1", 3, 4).poison_labels(y, 10).tolist() == y.tolist()
    with pytest.raises(hetps.InvalidArgument, match="outside 0..7"):
        flip.poison_labels(y, 8)
    # Scenario.labels: flipped for the scenario's attackers (is_byzantine's draw over the
    # training clients, ranks 1..6 after the evaluator), else the same.
    flags = dict(CLIENT_FLAGS, byzantine_fraction="0.5", attack="label_flip", data_seed="3")
    flipped = []
    for rank in range(7):
        s = Scenario(flags, rank)
        s.clients = 6
        out = s.labels(y, 10)
        assert s.labels_taken and out.dtype == np.int64
        flipped.append(out.tolist() != y.tolist())
    assert flipped == [False] + [hetps.is_byzantine(0.5, 3, c, 6) for c in range(6)]
    assert sum(flipped) == 3
    with pytest.raises(RuntimeError, match="once the client joined"):
        Scenario(flags, 1).labels(y, 10)  # before joining nobody knows who attacks


def test_python_clients_attack_where_the_cpp_clients_would(tmp_path):
    done, run_dir, log = fed_run(tmp_path, "fedavg", "--byzantine_fraction=0.34",
                                 "--attack=scale:factor=30")
    assert done.returncode == 0, done.stdout + done.stderr + log
    said = sorted(int(r) for r in re.findall(r"client (\d+) is Byzantine: scale:factor=30", log))
    # Ranks 1-6 train (rank 0 evaluates); --data_seed=3 picks round(0.34 x 6) of them.
    expected = [r for r in range(1, 7) if hetps.is_byzantine(0.34, 3, r - 1, 6)]
    assert said == expected and len(said) == 2


def test_a_client_killed_mid_round_is_never_applied_and_the_run_finishes(tmp_path):
    # Every client trains in every round; client 2 dies in round 1 after training, before
    # uploading: the round closes without it once the scheduler declares it dead.
    done, run_dir, log = fed_run(tmp_path, "fedavg", "--parallel=6", "--per_round=6",
                                 "--uploads=18", env={"HETPS_TEST_KILL": "2:1"})
    assert "killed by signal 9" in log
    assert done.returncode == 0, done.stdout + done.stderr + log
    assert "all 3 aggregations were made: the run counts" in done.stdout
    measured = rows(run_dir / "rounds.csv")
    assert len(measured) == 3
    assert [r["kept"] for r in measured] == ["6", "5", "5"]
    assert "2" in measured[0]["kept_ranks"].split()
    assert not any("2" in r["kept_ranks"].split() for r in measured[1:])
    assert not os.path.exists(run_dir / "client-2.json")


def test_a_cohort_member_killed_before_its_secure_setup_is_left_out_and_the_run_finishes(
        tmp_path):
    # Secure FedBuff cohorts of all 6 clients: client 2 dies in cohort 1 after training, before
    # it advertised its keys; the cohort goes on without it once the scheduler declares it
    # dead, and the next cohort is the 5 left.
    done, run_dir, log = fed_run(tmp_path, "fedbuff", "--secure_aggregation=secagg+",
                                 "--parallel=6", "--per_round=6", "--uploads=18",
                                 env={"HETPS_TEST_KILL": "2:1"})
    assert "killed by signal 9" in log
    assert done.returncode == 0, done.stdout + done.stderr + log
    measured = rows(run_dir / "rounds.csv")
    assert [r["kept"] for r in measured] == ["6", "5", "5"]
    assert not any("2" in r["kept_ranks"].split() for r in measured[1:])
    assert "applies nothing" not in log


def test_python_clients_run_behind_links_in_their_own_network_namespaces(tmp_path):
    probe = f"hetps-probe-{os.getpid()}"  # namespaces can be made here (as NetnsLinks asks)
    if os.geteuid() != 0 or subprocess.run(
            ["sh", "-c", f"command -v tc >/dev/null && ip netns add {probe} && "
                         f"ip netns del {probe}"], capture_output=True).returncode != 0:
        pytest.skip("--links=netns needs root, ip, tc and network namespaces")
    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    done, run_dir, log = fed_run(tmp_path, "fedbuff", "--links=netns", "--netns_subnet=10.209")
    assert done.returncode == 0, done.stdout + done.stderr + log
    assert "6 clients in network namespaces" in log
    # Each client dialled the cluster through its namespace's proxy: a round trip (pull, then
    # upload) crosses the 5 ms link four times.
    trips = [float(r["mean_round_trip_s"]) for r in rows(run_dir / "clients.csv")
             if int(r["kept"]) > 0]
    assert trips and min(trips) >= 0.02
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert after == before, "the launch removes its namespaces"


class Mlp:
    """The C++ edge client's --model=mlp --hidden=8 tensors; trains to global + 1."""

    def __init__(self):
        self.seen = []

    def get_parameters(self, config):
        return {"fc0.w": np.zeros((8, 784), np.float32), "fc0.b": np.zeros(8, np.float32),
                "fc1.w": np.zeros((10, 8), np.float32), "fc1.b": np.zeros(10, np.float32)}

    def fit(self, parameters, config):
        self.seen.append(config["round"])
        return {n: a + 1 for n, a in parameters.items()}, 100, {}


def run_clients(c, clients, with_cpp):
    """Runs the Python `clients` of cluster `c`, one thread each, beside one C++ edge client of
    rank 0 when `with_cpp` (the Python ones then take ranks 1..); returns the C++ client's
    output (empty without one) and each Python client's result."""
    cpp = subprocess.Popen(
        [os.path.join(BIN, "hetps-worker"), f"--scheduler={c.endpoint}", "--rank=0",
         "--workload=edge", "--model=mlp", "--hidden=8", "--local_epochs=1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) if with_cpp else None
    results = [None] * len(clients)

    def run(i):
        results[i] = hetps.fed.run_client(clients[i], c.endpoint, rank=i + int(with_cpp),
                                          log=lambda line: None)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    if cpp is None:
        return "", results
    output = cpp.communicate(timeout=60)[0]
    assert cpp.returncode == 0, output
    return output, results


def test_cpp_and_python_clients_take_part_in_one_run(cluster):
    """Under the scheduler's layer-wise schedule too: fc1 (layer 1) goes up every second
    round, its deltas of the round between added in."""
    c = cluster(workers=3, server_flags=["--consistency=selected", "--aggregator=fedavg",
                                         "--optimizer=sgd:lr=1", "--init=worker"],
                scheduler_flags=["--clients_per_round=3", "--rounds=3",
                                 "--layer_schedule=fixed:deep=2,deep_from=1"])
    clients = [Mlp(), Mlp()]
    output, results = run_clients(c, clients, with_cpp=True)
    assert "final test accuracy" in output  # rank 0 evaluated after the last round
    for client, done in zip(clients, results):
        assert client.seen == [0, 1, 2]
        assert (done["rounds"], done["kept"], done["failed"]) == (3, 3, 0)


SECURE_SERVERS = ["--consistency=selected", "--aggregator=fedavg", "--optimizer=sgd:lr=1",
                  "--init=worker"]


def test_python_clients_in_secure_rounds_give_the_servers_exactly_the_weighted_mean(cluster):
    """--secure_aggregation: three Python clients mask their updates (every one global + 1 after
    fit, a delta of -1 with weight 100); FedAvg's step on the unmasked mean moves every value by
    exactly +1 a round, so round r starts from r everywhere."""
    c = cluster(workers=3, server_flags=SECURE_SERVERS,
                scheduler_flags=["--clients_per_round=3", "--rounds=3",
                                 "--secure_aggregation=secagg+"])

    class Recording(Mlp):
        def fit(self, parameters, config):
            self.starts = getattr(self, "starts", []) + [dict(parameters)]
            return super().fit(parameters, config)

    clients = [Recording(), Recording(), Recording()]
    _, results = run_clients(c, clients, with_cpp=False)
    for client, done in zip(clients, results):
        assert done is not None and client.seen == [0, 1, 2]
        assert (done["rounds"], done["kept"], done["failed"]) == (3, 3, 0)
        for r, start in enumerate(client.starts):
            for name, a in start.items():
                assert np.all(a == float(r)), (r, name, a.min(), a.max())
    for r in range(3):
        assert f"secure round {r}: 3 uploads unmasked" in c.log(0), c.log(0)


def test_cpp_and_python_clients_share_secure_rounds(cluster):
    c = cluster(workers=3, server_flags=SECURE_SERVERS,
                scheduler_flags=["--clients_per_round=3", "--rounds=3",
                                 "--secure_aggregation=secagg+"])
    clients = [Mlp(), Mlp()]
    output, results = run_clients(c, clients, with_cpp=True)
    assert "secure aggregation in 3 rounds" in output, output
    for done in results:
        assert (done["rounds"], done["kept"], done["failed"]) == (3, 3, 0)


def test_the_layer_accumulator_delivers_every_delta_summed():
    acc = hetps.LayerAccumulator([(0, 3), (1, 2)])
    schedule = {"spec": "fixed", "periods": [1, 3], "mean": False}
    sent = np.zeros(2, np.float32)
    for step in range(6):
        acc.begin_step(schedule)
        a, b = np.full(3, step + 1, np.float32), np.full(2, 10.0 * (step + 1), np.float32)
        assert acc.offer(0, a) and a[0] == step + 1
        if acc.offer(1, b):
            sent += b
            assert step in (2, 5) and acc.steps(1) == 3
    assert list(sent) == [210.0, 210.0]  # 10 * (1 + ... + 6), nothing dropped
    assert acc.deferred_bytes() == 4 * 8
    with pytest.raises(ValueError):
        acc.offer(1, np.zeros(3, np.float32))  # the wrong size
    with pytest.raises(ValueError):
        acc.offer(2, np.zeros(2, np.float32))  # no such tensor
    with pytest.raises(ValueError):
        acc.offer(0, np.zeros(3, np.float64))  # not float32


def test_python_clients_in_virtual_time_give_the_same_run_under_load(tmp_path):
    # The clients' rounds take their device's and link's virtual time (training: 6 FLOPs per
    # parameter and sample at --device_gflops, times the client's slowdown), so the rounds log
    # (all but host_s) is the same with two busy loops competing for the host's cores.
    def outcome(name, hogs):
        (tmp_path / name).mkdir()
        busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(hogs)]
        try:
            done, run_dir, log = fed_run(tmp_path / name, "fedbuff", "--clock=virtual",
                                         "--device_gflops=0.001", "--clients_per_process=3")
        finally:
            for p in busy:
                p.kill()
                p.wait()
        assert done.returncode == 0, done.stdout + done.stderr + log
        measured = rows(run_dir / "rounds.csv")
        assert len(measured) >= 3 and any(r["test_accuracy"] for r in measured)
        return [{k: v for k, v in r.items() if k != "host_s"} for r in measured]

    plain = outcome("plain", 0)
    assert float(plain[-1]["wall_s"]) > 0  # virtual seconds from the first round's opening
    assert outcome("loaded", 2) == plain
