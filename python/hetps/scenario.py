"""What a federated scenario says of one client, for clients in Python (docs/federated.md).

`hetps fed run --client_cmd=...` and `hetps launch --worker_cmd=...` start a client program
with the flags a C++ edge client gets (the scenario's and the algorithm's, and --rank); the
Scenario reads them so that the Python client of rank r is the same emulated device as the C++
one: its link (bandwidths, latency, jitter, loss; in the transport, or its network namespace's
with --links=netns), its compute slowdown, its availability and mid-round failures, its data
partition, the layer schedule and the local training settings. Every draw is the C++ client's
own code (hetps._hetps.edge_profile, edge_device, make_availability, split_samples).

    s = Scenario.from_argv()            # sys.argv[1:] and $HETPS_RANK
    s.link, s.slowdown                  # what hetps.fed.run_client applies
    s.device_kind, s.device_gflops      # its --device_table row, the reference rate
    s.partition(labels)                 # this client's sample indices (after joining)
    s.config                            # local_epochs, batch_size, lr, proximal_mu for fit
"""
import os
import sys

from ._hetps import (Attacker, check_attack, edge_device, edge_profile, is_byzantine,
                     make_availability, parse_privacy, split_samples)

# The flags a client program may meet that have defaults here (hetps-worker's defaults).
_DEFAULTS = {
    "partition": "iid", "dirichlet_alpha": "0.5", "shards_per_client": "2", "data_seed": "1",
    "local_epochs": "1", "batch": "32", "local_lr": "0.05", "prox_mu": "0",
    "availability": "always", "fail_fraction": "0", "evaluators": "0", "eval_every": "5",
    "deep_from": "-1", "deep_period": "15", "deep_rounds": "5", "codec": "none",
    "pull_codec": "none", "run_dir": "", "clock": "wall", "device_gflops": "1",
    "byzantine_fraction": "0", "attack": "sign_flip", "dp": "none",
}


def parse_flags(argv):
    """{name: value} of `--name=value` (or `--name value`, `--name` alone: "true") arguments;
    anything else raises ValueError naming it."""
    flags, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or len(arg) < 3:
            raise ValueError(f"'{arg}' is not a flag (--name=value)")
        if "=" in arg:
            name, value = arg[2:].split("=", 1)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            name, value = arg[2:], argv[i + 1]
            i += 1
        else:
            name, value = arg[2:], "true"
        flags[name] = value
        i += 1
    return flags


class Scenario:
    """Client `rank` of the scenario whose flags are `flags` ({name: value})."""

    def __init__(self, flags=None, rank=None):
        self.flags = dict(_DEFAULTS)
        self.flags.update(flags or {})
        if rank is None:
            rank = int(self.flags.get("rank", os.environ.get("HETPS_RANK", "-1")))
        self.rank = int(rank)
        self.evaluators = self._int("evaluators", 0)
        self.eval_every = self._int("eval_every", 1)
        self.link, self.slowdown = edge_profile(self.flags, self.rank)
        self.fail_fraction = self._float("fail_fraction", 0, 1)
        # Emulated attackers (docs/robust.md): the C++ clients' choice of who and what.
        self.byzantine_fraction = self._float("byzantine_fraction", 0, 1)
        self.attack = self.flags["attack"]
        check_attack(self.byzantine_fraction, self.attack)
        self.labels_taken = False  # labels() was called (a label attacker must)
        # --dp (docs/robust.md): clip each update to dp_clip; local: noise of std dp_noise x clip.
        self.dp, self.dp_clip, self.dp_noise, _ = parse_privacy(self.flags["dp"])
        self.prox_mu = self._float("prox_mu", 0)
        self.deep_from = self._int("deep_from", -1)
        self.deep_period = self._int("deep_period", 1)
        self.deep_rounds = self._int("deep_rounds", 1)
        if self.deep_from >= 0 and self.deep_rounds > self.deep_period:
            raise ValueError("the layer schedule needs 1 <= deep_rounds <= deep_period")
        seed = self._int("data_seed", 0)  # the C++ client's seeds, from --data_seed
        client = max(0, self.rank - self.evaluators)
        self.availability = make_availability(self.flags["availability"],
                                              seed * 104729 + max(0, self.rank), client)
        self.fail_seed = seed * 7919 + 17 * max(0, self.rank) + 1
        self.clients = None  # training clients: num_workers - evaluators, set on joining
        # Virtual time (docs/virtual-time.md): the scheduler runs --clock=virtual; a round's
        # download, training and upload take the link's and the device model's virtual time.
        if self.flags["clock"] not in ("wall", "virtual"):
            raise ValueError(f"--clock is wall or virtual, not '{self.flags['clock']}'")
        self.virtual = self.flags["clock"] == "virtual"
        self.device_kind, self.device_gflops = edge_device(self.flags, self.rank)
        self.config = {
            "local_epochs": self._int("local_epochs", 1),
            "batch_size": self._int("batch", 1),
            "lr": self._float("local_lr", 0),
            "proximal_mu": self.prox_mu,
        }

    @classmethod
    def from_argv(cls, argv=None, rank=None):
        """The scenario of the flags this program was started with (sys.argv[1:])."""
        return cls(parse_flags(sys.argv[1:] if argv is None else argv), rank)

    def for_rank(self, rank):
        """The same scenario seen by client `rank` (a pool's other logical clients)."""
        return Scenario(self.flags, rank)

    def attacker(self):
        """This client's hetps.Attacker when it is one of the scenario's Byzantine clients
        (round(byzantine_fraction x clients) of the training clients, the C++ clients' draw from
        --data_seed), else None. REQUIRES: clients (set on joining)."""
        if self.byzantine_fraction <= 0 or self.evaluator or not self.clients:
            return None
        seed = self._int("data_seed", 0)
        client = (self.rank - self.evaluators) % self.clients
        if not is_byzantine(self.byzantine_fraction, seed, client, self.clients):
            return None
        return Attacker(self.attack, seed, self.rank)

    @property
    def evaluator(self):
        """Ranks 0..evaluators-1 measure the global model and do not train."""
        return 0 <= self.rank < self.evaluators

    @property
    def run_dir(self):
        return self.flags["run_dir"]

    def uploads(self, layer, round_):
        """Whether layer `layer` goes up in round `round_` (the layer-wise schedule of the C++
        client, worker/layer_schedule.h: deep layers on the last deep_rounds of each period)."""
        if self.deep_from < 0 or layer < self.deep_from:
            return True
        r = round_ % self.deep_period
        return r == 0 or r > self.deep_period - self.deep_rounds

    def labels(self, labels, classes):
        """The labels this client trains on, as a new int64 array: `labels` (integers in
        0..classes-1), changed as its attack says when it is one of the scenario's attackers
        and the attack poisons data (--attack=label_flip: y -> classes-1-y, as the C++ clients
        do), else the same values. A client's constructor passes its training labels through it;
        a label attacker whose client did not is refused when the run starts."""
        import numpy as np
        if self.clients is None:
            raise RuntimeError("the scenario's attackers are known once the client joined: call "
                               "labels() in the client's constructor under hetps.fed.main")
        self.labels_taken = True
        attacker = self.attacker()
        if attacker is None:
            return np.array(labels, dtype=np.int64)
        return attacker.poison_labels(labels, classes)

    def partition(self, labels, classes=None):
        """This client's sample indices of a data set with `labels`, split among the scenario's
        training clients by --partition, --dirichlet_alpha, --shards_per_client and --data_seed
        exactly as the C++ clients split it (an evaluator gets none)."""
        import numpy as np
        if self.clients is None:
            raise RuntimeError("the scenario's clients are known once the client joined: call "
                               "partition() in the client's constructor under hetps.fed.main")
        if self.evaluator:
            return np.zeros(0, dtype=np.int64)
        labels = np.asarray(labels, dtype=np.int32)
        classes = int(labels.max()) + 1 if classes is None else int(classes)
        parts = split_samples(labels.tolist(), classes, self.clients, self.flags["partition"],
                              self._float("dirichlet_alpha", 0),
                              self._int("shards_per_client", 1), self._int("data_seed", 0))
        return np.asarray(parts[(self.rank - self.evaluators) % self.clients], dtype=np.int64)

    def _int(self, name, minimum):
        value = self.flags[name]
        try:
            v = int(value)
        except ValueError:
            raise ValueError(f"--{name} needs an integer, got '{value}'") from None
        if v < minimum:
            raise ValueError(f"--{name} must be >= {minimum}, got {v}")
        return v

    def _float(self, name, minimum, maximum=None):
        value = self.flags[name]
        try:
            v = float(value)
        except ValueError:
            raise ValueError(f"--{name} needs a number, got '{value}'") from None
        if not v >= minimum or (maximum is not None and v > maximum):
            bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
            raise ValueError(f"--{name} must be {bound}, got {value}")
        return v
