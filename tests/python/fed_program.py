#!/usr/bin/env python3
"""A federated client program for tests/python/test_fed_scenario.py: least squares on a seeded
synthetic data set split by the scenario. Each client writes <run_dir>/client-<rank>.json (what
the scenario gave it) after its run; with HETPS_TEST_KILL=R:T in its environment, client R kills
its whole process in the middle of round T (after training, before uploading)."""
import json
import os
import signal

import numpy as np

import hetps.fed

TRUE_W = np.linspace(-1, 1, 6).astype(np.float32)


def data():
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 5, 600)
    x = rng.normal(size=(600, 6)).astype(np.float32) + labels[:, None]
    return labels, x, (x @ TRUE_W).astype(np.float32)


class LeastSquares:
    def __init__(self, scenario):
        self.s = scenario
        labels, x, y = data()
        self.mine = scenario.partition(labels, classes=5)
        self.x, self.y = (x, y) if scenario.evaluator else (x[self.mine], y[self.mine])
        self.rounds = []

    def get_parameters(self, config):
        return {"w": np.zeros(6, np.float32)}

    def fit(self, parameters, config):
        self.rounds.append(config["round"])
        w = parameters["w"]
        for _ in range(config["local_epochs"]):
            w = w - 0.01 * self.x.T @ (self.x @ w - self.y) / len(self.x)
        if os.environ.get("HETPS_TEST_KILL") == f"{self.s.rank}:{config['round']}":
            os.kill(os.getpid(), signal.SIGKILL)
        return {"w": w.astype(np.float32)}, len(self.x), {"loss": self.loss(w)}

    def evaluate(self, parameters, config):
        loss = self.loss(parameters["w"])
        return loss, len(self.x), {"accuracy": 1 / (1 + loss)}

    def loss(self, w):
        return float(np.mean((self.x @ w - self.y) ** 2))


def main():
    made = []

    def make(scenario):
        made.append(LeastSquares(scenario))
        return made[-1]

    code = hetps.fed.main(make)
    for c in made:
        link = c.s.link
        record = {"rank": c.s.rank, "samples": c.mine.tolist(), "rounds": c.rounds,
                  "slowdown": c.s.slowdown, "up_mbps": link.up_mbps, "down_mbps": link.down_mbps,
                  "latency_ms": link.latency_ms, "pid": os.getpid(), "config": c.s.config}
        with open(os.path.join(c.s.run_dir, f"client-{c.s.rank}.json"), "w") as f:
            json.dump(record, f)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
