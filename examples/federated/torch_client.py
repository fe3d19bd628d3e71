#!/usr/bin/env python3
"""A federated client in PyTorch: Fashion-MNIST under any scenario and algorithm.

    hetps fed compare --flagfile=deploy/edge/hetero20.flags \\
        --algorithms=fedavg,fedasync,fedbuff,fedsa \\
        --client_cmd='python3 examples/federated/torch_client.py'

Each client trains on its partition of the training set (the scenario's --partition,
--dirichlet_alpha and --data_seed, split exactly as the C++ clients split it), the scenario's
--model (mlp with --hidden, or the LeNet-5 style cnn), with --local_epochs of SGD at --local_lr
in batches of --batch and FedProx's proximal term when --prox_mu > 0. The evaluator (rank 0)
measures the global model on the 10k test set. Its link, device, availability and failures are
the scenario's, applied by hetps.fed. With --clients_per_process=N one process hosts N clients:
the data set is read once per process and every client keeps only its indices.
"""
import gzip
import os
import threading

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import hetps.fed

_data, _lock = {}, threading.Lock()


def fashion_mnist(directory, split):
    """(images float32 [n, 1, 28, 28] in [0, 1], labels int64), read once per process."""
    with _lock:
        if split not in _data:
            prefix = "train" if split == "train" else "t10k"
            arrays = []
            for kind, offset in (("images-idx3", 16), ("labels-idx1", 8)):
                path = os.path.join(directory, f"{prefix}-{kind}-ubyte.gz")
                with gzip.open(path, "rb") as f:
                    arrays.append(np.frombuffer(f.read(), np.uint8, offset=offset))
            x = torch.from_numpy(arrays[0].astype(np.float32) / 255).reshape(-1, 1, 28, 28)
            _data[split] = (x, torch.from_numpy(arrays[1].astype(np.int64)))
        return _data[split]


def make_model(flags):
    if flags.get("model", "mlp") == "cnn":  # the C++ trainer's --model=cnn
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    widths = [784] + [int(w) for w in flags.get("hidden", "256,128").split(",")] + [10]
    layers = [nn.Flatten()]
    for i in range(len(widths) - 1):
        layers += [nn.Linear(widths[i], widths[i + 1]), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class FashionClient:
    def __init__(self, scenario):
        torch.manual_seed(scenario.flags.get("data_seed", "1"))  # every client's model alike
        self.model = make_model(scenario.flags)
        directory = scenario.flags.get("dataset_dir", "/usr/share/datasets/fashion-mnist")
        self.x, self.y = fashion_mnist(directory, "train")
        self.mine = torch.from_numpy(scenario.partition(self.y.numpy(), classes=10))
        # What it trains on: its labels flipped when the scenario makes it a label_flip attacker.
        self.y = torch.from_numpy(scenario.labels(self.y.numpy(), classes=10))
        if scenario.evaluator:
            self.test = fashion_mnist(directory, "test")
        self.rng = torch.Generator().manual_seed(1000003 * int(scenario.flags["data_seed"])
                                                 + scenario.rank)

    def get_parameters(self, config):
        return hetps.fed.parameters_of(self.model)

    def fit(self, parameters, config):
        hetps.fed.load_parameters(self.model, parameters)
        start = [p.detach().clone() for p in self.model.parameters()]
        mu, lr, batch = config["proximal_mu"], config["lr"], config["batch_size"]
        losses = []
        for _ in range(config["local_epochs"]):
            order = self.mine[torch.randperm(len(self.mine), generator=self.rng)]
            for at in range(0, len(order), batch):
                idx = order[at:at + batch]
                loss = F.cross_entropy(self.model(self.x[idx]), self.y[idx])
                if mu > 0:  # FedProx: stay near the global model
                    loss = loss + mu / 2 * sum(((p - s) ** 2).sum()
                                               for p, s in zip(self.model.parameters(), start))
                self.model.zero_grad()
                loss.backward()
                with torch.no_grad():
                    for p in self.model.parameters():
                        p -= lr * p.grad
                losses.append(loss.item())
        return hetps.fed.parameters_of(self.model), len(self.mine), {"loss": np.mean(losses)}

    def evaluate(self, parameters, config):
        hetps.fed.load_parameters(self.model, parameters)
        x, y = self.test
        with torch.no_grad():
            logits = self.model(x)
            loss = F.cross_entropy(logits, y).item()
            accuracy = (logits.argmax(1) == y).float().mean().item()
        return loss, len(y), {"accuracy": accuracy}


if __name__ == "__main__":
    torch.set_num_threads(1)  # many clients share the machine's cores
    raise SystemExit(hetps.fed.main(FashionClient))
