"""hetps.fed: Python federated clients against live clusters running federated rounds."""
import threading

import numpy as np
import pytest

import hetps.fed

FEDAVG = ["--consistency=selected", "--aggregator=fedavg", "--optimizer=sgd:lr=1",
          "--init=worker"]
WEIGHTS = [2, 2, 4, 8]  # sums of powers of two: every mean below is exact in float32


class Shift:
    """Trains to global + (index + 1) on WEIGHTS[index] samples; records what it was given."""

    def __init__(self, index, fail_round=None):
        self.index, self.fail_round, self.seen = index, fail_round, {}

    def get_parameters(self, config):
        return {"w": np.zeros(5, np.float32), "b": np.zeros((2, 3), np.float32)}

    def fit(self, parameters, config):
        self.seen[config["round"]] = parameters["w"][0]
        if config["round"] == self.fail_round:
            raise RuntimeError("this client's data loader broke")
        local = {n: a + (self.index + 1) for n, a in parameters.items()}
        return local, WEIGHTS[self.index], {"loss": 1.0 / (self.index + 1)}


def run_all(c, clients):
    results, errors = [None] * len(clients), []

    def run(i):
        try:
            results[i] = hetps.fed.run_client(clients[i], c.endpoint, log=lambda line: None)
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def test_fedavg_rounds_apply_the_sample_weighted_mean_of_the_uploads(cluster):
    c = cluster(workers=4, server_flags=FEDAVG,
                scheduler_flags=["--clients_per_round=4", "--rounds=3"])
    clients = [Shift(i) for i in range(4)]
    results = run_all(c, clients)
    # Each round moves the model by the weighted mean of the shifts: (2+4+12+32)/16 = 3.125.
    for client, done in zip(clients, results):
        assert client.seen == {0: 0.0, 1: 3.125, 2: 6.25}
        assert done == {"rounds": 3, "kept": 3, "failed": 0, "abandoned": 0,
                        "metrics": {"loss": 1.0 / (client.index + 1)}}


class Shift20(Shift):
    """Client i of 20: trains to global + (i + 1) on 4 samples (the first four) or 1."""

    def fit(self, parameters, config):
        self.seen[config["round"]] = parameters["w"][0]
        local = {n: a + (self.index + 1) for n, a in parameters.items()}
        return local, 4 if self.index < 4 else 1, {}


def test_twenty_clients_rounds_apply_the_sample_weighted_mean_exactly(cluster):
    c = cluster(workers=20, server_flags=FEDAVG,
                scheduler_flags=["--clients_per_round=20", "--rounds=3"])
    clients = [Shift20(i) for i in range(20)]
    results = run_all(c, clients)
    # (4 (1+2+3+4) + 5+6+...+20) / 32 = 240 / 32 = 7.5 per round, exact in float32.
    for client, done in zip(clients, results):
        assert client.seen == {0: 0.0, 1: 7.5, 2: 15.0}
        assert (done["rounds"], done["kept"]) == (3, 3)


def test_a_client_whose_fit_raises_is_left_out_of_that_round_only(cluster):
    c = cluster(workers=4, server_flags=FEDAVG,
                scheduler_flags=["--clients_per_round=4", "--rounds=3",
                                 "--round_deadline_ms=2000"])
    clients = [Shift(i, fail_round=1 if i == 3 else None) for i in range(4)]
    results = run_all(c, clients)
    # Round 1 closes at its deadline with clients 0-2: (2+4+12)/8 = 2.25.
    for client in clients:
        assert client.seen == {0: 0.0, 1: 3.125, 2: 5.375}
    assert results[3]["rounds"] == 2 and results[3]["kept"] == 2 and results[3]["failed"] == 1
    assert (results[0]["rounds"], results[0]["kept"], results[0]["failed"]) == (3, 3, 0)


class PlusOne(Shift):
    def fit(self, parameters, config):
        self.seen[config["round"]] = parameters["w"][0]
        return {n: a + 1 for n, a in parameters.items()}, 1, {}


def test_fedbuff_steps_once_per_k_uploads_on_their_mean(cluster):
    """Asynchronous tasks (consistency committed), one at a time: FedBuff with K = 2 buffers
    the deltas (-1 each) and steps by their mean every second upload, so the tasks see the
    model at 0, 0, 1, 1 and the run of 4 uploads moves it to 2."""
    c = cluster(workers=3, server_flags=["--consistency=committed", "--aggregator=fedbuff:k=2",
                                         "--optimizer=sgd:lr=1", "--init=worker"],
                scheduler_flags=["--concurrency=1", "--rounds=4"])
    clients = [PlusOne(i) for i in range(3)]
    results = run_all(c, clients)
    seen = sorted(v for client in clients for v in client.seen.values())
    assert seen == [0.0, 0.0, 1.0, 1.0]
    assert sum(r["kept"] for r in results) == 4


class WrongShape(Shift):
    def fit(self, parameters, config):
        return {"w": np.zeros(4, np.float32), "b": parameters["b"]}, 1, {}


class Float64(Shift):
    def fit(self, parameters, config):
        return {"w": parameters["w"].astype(np.float64), "b": parameters["b"]}, 1, {}


class Missing(Shift):
    def fit(self, parameters, config):
        return {"w": parameters["w"]}, 1, {}


@pytest.mark.parametrize("client,message", [
    (WrongShape(0), r"parameter 'w' has shape \(4,\), the model's is \(5,\)"),
    (Float64(0), r"parameter 'w' is float64, not float32"),
    (Missing(0), r"missing parameters \['b'\]"),
])
def test_what_fit_returns_is_checked_with_a_clear_message(cluster, client, message):
    c = cluster(workers=1, server_flags=FEDAVG,
                scheduler_flags=["--clients_per_round=1", "--rounds=2"])
    with pytest.raises(ValueError, match=message):
        hetps.fed.run_client(client, c.endpoint)


def test_partitions_are_the_cpp_clients_and_cover_every_sample_once():
    labels = np.repeat(np.arange(10), 100)  # 1000 samples, 10 classes
    for scheme in ["iid", "dirichlet", "shards"]:
        parts = hetps.fed.partition(labels, 8, scheme=scheme, alpha=0.3, seed=4)
        assert len(parts) == 8
        every = np.sort(np.concatenate(parts))
        if scheme != "shards":  # shards may leave a remainder unassigned
            np.testing.assert_array_equal(every, np.arange(1000))
        assert len(np.unique(every)) == len(every)
        again = hetps.fed.partition(labels, 8, scheme=scheme, alpha=0.3, seed=4)
        assert all(np.array_equal(a, b) for a, b in zip(parts, again))  # seeded
    skewed = hetps.fed.partition(labels, 8, scheme="dirichlet", alpha=0.1, seed=4)
    top_share = max(np.bincount(labels[p], minlength=10).max() / max(1, len(p)) for p in skewed)
    assert top_share > 0.5  # a small alpha gives clients a dominant label
    with pytest.raises(ValueError, match="unknown partition"):
        hetps.fed.partition(labels, 8, scheme="zipf")


class Blind:
    """Trains on data of its own: it never takes its labels from the scenario."""

    def __init__(self, scenario):
        pass

    def get_parameters(self, config):
        return {"w": np.zeros(4, np.float32)}

    def fit(self, parameters, config):
        return parameters, 1, {}


def test_a_label_flip_attacker_whose_client_ignores_its_labels_is_refused(cluster):
    from hetps.scenario import Scenario
    c = cluster(workers=1, server_flags=FEDAVG,
                scheduler_flags=["--clients_per_round=1", "--rounds=1"])
    scenario = Scenario({"byzantine_fraction": "1", "attack": "label_flip"})
    with pytest.raises(RuntimeError, match=r"scenario\.labels\(y, classes\)"):
        hetps.fed.run_client(Blind, c.endpoint, log=lambda line: None, scenario=scenario)
