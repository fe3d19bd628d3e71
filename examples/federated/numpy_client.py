#!/usr/bin/env python3
"""A federated client in numpy: linear regression on its own data (docs/federated.md)."""
import numpy as np
import hetps.fed

TRUE_W = np.arange(1, 9, dtype=np.float32) / 8  # what every client's data comes from


class LinearClient:
    def __init__(self, scenario):  # hetps.scenario.Scenario: the rank, partition, settings
        rng = np.random.default_rng(scenario.rank)
        self.x = rng.normal(size=(50 + 25 * scenario.rank, 8)).astype(np.float32)
        self.y = self.x @ TRUE_W + rng.normal(0, 0.1, len(self.x)).astype(np.float32)

    def get_parameters(self, config):
        return {"w": np.zeros(8, np.float32)}

    def fit(self, parameters, config):
        w = parameters["w"]
        for _ in range(5):  # local gradient descent on the mean squared error
            w = w - 0.1 * 2 * self.x.T @ (self.x @ w - self.y) / len(self.x)
        loss = float(np.mean((self.x @ w - self.y) ** 2))
        return {"w": w.astype(np.float32)}, len(self.x), {"loss": loss}


if __name__ == "__main__":
    raise SystemExit(hetps.fed.main(LinearClient))
