"""Federated clients in Python (docs/federated.md).

A client is any object with

    get_parameters(config) -> {name: float32 array}      the model's initial parameters
    fit(parameters, config) -> (parameters, num_samples, metrics)
    evaluate(parameters, config) -> (loss, num_samples, metrics)   evaluators only

`fit` gets the global model of its round and returns the model it trained locally, how many
samples it trained on (the upload's weight) and a dict of figures. `run_client(client)` joins
the cluster, declares the model (every client alike; the first offer of each tensor is its
initial value), and then repeats until the run's rounds are done: wait to be selected (or for a
concurrency slot), pull the global model, call fit, upload the delta (global - local, what the
servers' aggregators apply) weighted by num_samples, report it, and report the metrics. A client
program's main is `hetps.fed.main(MyClient)`: the scenario of the flags it was started with
(hetps.scenario.Scenario: its link, device, availability, failures, partition, layer schedule)
applies, MyClient(scenario) is built once the client joined, and a process started for several
ranks (hetps launch --workers_per_process) hosts them all.

    import numpy as np, hetps.fed

    class Mean:
        def __init__(self, data): self.data = data
        def get_parameters(self, config): return {"w": np.zeros(4, np.float32)}
        def fit(self, parameters, config):
            return {"w": self.data.mean(0).astype(np.float32)}, len(self.data), {}

    hetps.fed.run_client(Mean(np.random.rand(100, 4)))

`config` holds "round" (the round, or in asynchronous modes the upload's base version), "rank",
and the scenario's "local_epochs", "batch_size", "lr" and "proximal_mu" (FedProx's mu). An
exception raised by fit fails the client's round only: its traceback is printed, nothing of the
round is uploaded (the round closes without it, as for a client that drops out), and the client
asks for the next one. What fit returns is checked: a missing or unknown parameter, another
shape or a dtype other than float32 raises ValueError naming it.
"""
import math
import os
import sys
import threading
import time
import traceback

import numpy as np

from ._hetps import Client, Error, LayerAccumulator, SecureUpload, VirtualRound
from ._hetps import split_samples as _split_samples
from .scenario import Scenario


def _checked(model, reference, what):
    """`model` as {name: float32 array} of the reference's names and shapes, or ValueError."""
    if not isinstance(model, dict):
        raise ValueError(f"{what} must be a dict of name -> float32 array, got {type(model)}")
    missing = [n for n in reference if n not in model]
    unknown = [n for n in model if n not in reference]
    if missing or unknown:
        raise ValueError(f"{what}: missing parameters {missing}, unknown parameters {unknown}")
    for name, ref in reference.items():
        a = model[name]
        if not isinstance(a, np.ndarray) and hasattr(a, "detach"):  # a torch tensor
            a = a.detach().cpu().numpy()
        a = np.asarray(a)
        if a.dtype != np.float32:
            raise ValueError(f"{what}: parameter {name!r} is {a.dtype}, not float32")
        if a.shape != ref.shape:
            raise ValueError(f"{what}: parameter {name!r} has shape {a.shape}, the model's is "
                             f"{ref.shape}")
    return {name: np.ascontiguousarray(model[name]) for name in reference}


def _fit_result(result):
    if not (isinstance(result, tuple) and len(result) == 3):
        raise ValueError("fit must return (parameters, num_samples, metrics)")
    parameters, num_samples, metrics = result
    if not (isinstance(num_samples, (int, np.integer)) and num_samples > 0):
        raise ValueError(f"fit's num_samples must be an int > 0, got {num_samples!r}")
    return parameters, int(num_samples), dict(metrics or {})


def _layers(names):
    """Each parameter's layer: parameters of one module (the name before its last '.', as
    fc1.weight and fc1.bias) share one, numbered in order of first appearance."""
    layers = {}
    for name in names:
        layers.setdefault(name.rsplit(".", 1)[0], len(layers))
    return {name: layers[name.rsplit(".", 1)[0]] for name in names}


def _make(client, scenario):
    """The client object: `client` itself, or what a factory (a class, or any callable without
    a fit) makes of the scenario."""
    factory = isinstance(client, type) or not hasattr(client, "fit")
    return client(scenario) if factory else client


class _Run:
    """One client's run in a joined cluster: the loop of rounds, or an evaluator's loop."""

    def __init__(self, c, client, scenario, log):
        self.c, self.client, self.s, self.log = c, client, scenario, log
        self.start = time.monotonic()
        self.virtual = None  # VirtualRound under --clock=virtual, made once the model is known
        self.rng = np.random.default_rng(scenario.fail_seed)
        self.dp_rng = np.random.default_rng(scenario.fail_seed * 65537 + 5)  # --dp=local
        self.done = {"rounds": 0, "kept": 0, "failed": 0, "abandoned": 0, "metrics": {}}
        self.clip_bit = {}  # adaptive clipping: this round's report (private())
        self.secure = None  # its SecureUpload, made at its first secure round
        self.attacker = scenario.attacker() if c is not None else None
        if self.attacker:
            log(f"client {c.rank} is Byzantine: {self.attacker.spec}")

    def declare(self):
        offered = self.client.get_parameters({})
        model = _checked(offered, {n: np.asarray(a) for n, a in dict(offered).items()},
                         "get_parameters")
        self.layers = _layers(list(model))
        self.c.declare([(name, a.shape, self.layers[name]) for name, a in model.items()])
        for name, a in model.items():
            self.c.init(name, a).wait()
        if not self.c.runs_rounds:
            raise RuntimeError("the servers run no federated rounds: start them with "
                               "--consistency=selected or committed (hetps fed run does)")
        self.global_model = {name: np.empty_like(a) for name, a in model.items()}
        self.names = list(model)
        if self.s.virtual:
            # A model of Python's own has no layer list to count: its training FLOPs per sample
            # are taken as 6 per parameter (2 forward, 4 backward), the usual estimate for
            # dense layers.
            flops = 6.0 * sum(a.size for a in model.values())
            self.virtual = VirtualRound(self.s.link, flops, self.s.device_gflops, self.s.slowdown)
        self.accumulator = LayerAccumulator([(self.layers[n], model[n].size) for n in self.names])

    def seconds(self):
        """The client's time: virtual seconds under --clock=virtual, else the host's."""
        return self.c.virtual_time if self.virtual else time.monotonic() - self.start

    def wait_online(self):
        back = self.s.availability.next_online(self.seconds())
        if back > self.seconds():
            self.log(f"client {self.c.rank} is offline until {back:.1f} s")
            if self.virtual:
                self.c.virtual_time = back  # its next check-in happens then; nothing sleeps
            else:
                time.sleep(max(0.0, back - self.seconds()))

    def train(self):
        """Rounds until the run's are done."""
        while True:
            self.wait_online()
            round_ = self.c.await_round()
            if round_ < 0:
                return self.done
            self.round(round_, self.seconds())

    def round(self, round_, selected_s):
        secure = self.c.round_secure  # --secure_aggregation: masked, unmasked by the others
        pulled = self.c.stats()["bytes_pulled"]
        self.c.pull_all(self.global_model).wait()
        if self.virtual:
            self.c.virtual_time = self.virtual.download(
                selected_s, self.c.stats()["bytes_pulled"] - pulled)
        config = dict(self.s.config, round=round_, rank=self.c.rank)
        started = time.monotonic()
        try:
            result = self.client.fit({n: a.copy() for n, a in self.global_model.items()}, config)
        except Exception:  # the client's round fails; the run goes on
            self.done["failed"] += 1
            self.log(f"client {self.c.rank}: fit raised in round {round_}; nothing uploaded:\n"
                     + traceback.format_exc().rstrip())
            if secure:  # reported without an upload: the secure round waits no more for it
                self.c.finish_round()
            return
        parameters, num_samples, metrics = _fit_result(result)
        if self.virtual:  # every epoch's samples on the modelled device
            epochs = int(config.get("local_epochs", 1))
            self.c.virtual_time = self.virtual.compute(self.c.virtual_time,
                                                       int(num_samples) * max(1, epochs))
        elif self.s.slowdown > 1:  # the emulated device is this much slower than this host
            time.sleep((time.monotonic() - started) * (self.s.slowdown - 1))
        local = _checked(parameters, self.global_model, "fit's parameters")
        weight = 1.0 if self.s.dp != "none" else float(num_samples)  # --dp: unweighted
        if secure and not self.setup_secure(weight, round_):
            return
        deltas = self.private({n: self.global_model[n] - local[n] for n in self.global_model},
                              self.c.round_clip, self.secure.kept if secure else None)
        if self.attacker:  # after clipping and noise, as the C++ client poisons its upload
            self.attacker.poison_update([deltas[n] for n in self.names])
        failed = self.rng.random() < self.s.fail_fraction
        if failed or not self.s.availability.online_throughout(selected_s, self.seconds()):
            self.abandon(deltas, num_samples, "fails" if failed else "went offline", round_)
            return
        pushed = self.c.stats()["bytes_pushed"]
        # A secure upload is masked as a whole: every tensor goes, as its words.
        sent = self.masked(deltas) if secure else self.to_send(deltas, round_)
        self.c.push_all(sent, weight=weight).wait()
        if self.virtual:
            self.c.virtual_time = self.virtual.upload(self.c.virtual_time,
                                                      self.c.stats()["bytes_pushed"] - pushed)
        kept = bool(self.c.finish_round(**self.clip_bit))
        self.done["kept"] += kept
        self.done["rounds"] += 1
        if secure:
            self.unmask(kept, round_)
        self.report(metrics)

    def setup_secure(self, weight, round_):
        """A secure round's phases 0 and 1 (docs/secure-aggregation.md), once the update's
        weight is known; False when this client cannot take part: it reports the round without
        an upload (a dropout the round survives)."""
        if self.secure is None:
            self.secure = SecureUpload(self.c)
        try:
            self.secure.setup(weight)
            return True
        except Error as e:
            self.log(f"client {self.c.rank}: secure round {round_} without this client: {e}")
            self.c.finish_round()
            self.done["rounds"] += 1
            return False

    def masked(self, deltas):
        """The secure round's words of every tensor, to push in place of the update."""
        return {n: self.secure.mask(n, np.ascontiguousarray(deltas[n], dtype=np.float32))
                for n in self.names}

    def unmask(self, kept, round_):
        try:
            self.secure.unmask(kept)
        except Error as e:
            self.log(f"client {self.c.rank}: round {round_} not unmasked here: {e}")

    def private(self, deltas, round_clip=0.0, kept=None):
        """--dp (docs/robust.md), as the C++ client does it: the whole update clipped to L2 norm
        dp_clip (under adaptive clipping the round's clip); local: Gaussian noise of std
        dp_noise x clip added to every value (under adaptive clipping the round's noise
        multiplier); distributed: a share of it, std / sqrt(K). Under adaptive clipping,
        finish_round reports whether the norm was within the clip: the bit itself (central),
        centred and noised here (local), or that under the round's masks (distributed)."""
        self.clip_bit = {}
        if self.s.dp == "none":
            return deltas
        norm = float(np.sqrt(sum(float(np.sum(np.square(d, dtype=np.float64)))
                                 for d in deltas.values())))
        clip = round_clip if round_clip > 0 else self.s.dp_clip
        scale = min(1.0, clip / norm) if norm > 0 else 1.0
        out = {n: (d * scale).astype(np.float32) for n, d in deltas.items()}
        share = 1.0
        if self.s.dp == "distributed":  # its share: K of them make the central noise
            if kept is None:
                raise RuntimeError("--dp=distributed needs the scheduler's "
                                   "--secure_aggregation (this round is not secure)")
            share = 1 / math.sqrt(max(1, kept))
        if self.s.dp in ("local", "distributed"):
            z = (self.c.round_update_noise if round_clip > 0 else 0) or self.s.dp_noise
            for n in out:
                out[n] += self.dp_rng.normal(0.0, z * clip * share,
                                             out[n].shape).astype(np.float32)
        if round_clip > 0:  # adaptive clipping
            within = norm <= clip
            if self.s.dp == "central":
                self.clip_bit = {"within_clip": within}
                return out
            bit = (0.5 if within else -0.5) + float(
                self.dp_rng.normal(0.0, self.c.round_count_noise * share))
            if self.s.dp == "local":
                self.clip_bit = {"within_noisy": bit}
            else:
                self.clip_bit = {"within_masked": self.secure.mask_count(bit)}
        return out

    def to_send(self, deltas, round_):
        """The scenario's own layer-wise schedule (--deep_from): the layers it sends this round.
        Else the scheduler's (docs/layer-schedules.md), as the C++ client follows it: a layer goes
        every P of this client's rounds with the deltas of the rounds between added in."""
        if self.s.deep_from >= 0:
            return {n: d for n, d in deltas.items() if self.s.uploads(self.layers[n], round_)}
        self.accumulator.begin_step(self.c.layer_schedule())
        sent = {}
        for t, n in enumerate(self.names):
            d = np.ascontiguousarray(deltas[n], dtype=np.float32)
            self.accumulator.measure(t, d, self.global_model[n])
            if self.accumulator.offer(t, d):
                sent[n] = d
        self.accumulator.report(self.c)
        return sent

    def abandon(self, deltas, num_samples, why, round_):
        """Uploads the first half of the delta's tensors and never reports it, as a C++ client
        that fails or goes offline mid-round does: no round keeps it."""
        names = list(deltas)[:max(1, len(deltas) // 2)]
        masked = self.secure is not None and self.secure.ready
        sent = self.masked(deltas) if masked else deltas
        self.c.push_all({n: sent[n] for n in names}, weight=float(num_samples)).wait()
        self.done["abandoned"] += 1
        self.log(f"client {self.c.rank} {why} in round {round_}: {len(names)} of {len(deltas)} "
                 "tensors uploaded, the upload not reported")

    def report(self, metrics):
        figures = {k: float(v) for k, v in dict(metrics or {}).items()
                   if isinstance(v, (int, float, np.number))}
        if figures:
            self.c.report_metrics(figures)
            self.done["metrics"] = figures

    def evaluate(self):
        """An evaluator's run: every eval_every closed rounds, the global model's loss and
        accuracy (client.evaluate), into the scheduler's rounds log."""
        every = self.s.eval_every
        measured, next_ = None, every
        while True:
            closed, finished = self.c.await_rounds_closed(next_, measured)
            self.c.pull_all(self.global_model).wait()
            config = dict(self.s.config, round=closed, rank=self.c.rank)
            loss, _, metrics = self.client.evaluate(
                {n: a.copy() for n, a in self.global_model.items()}, config)
            accuracy = float(dict(metrics or {}).get("accuracy", float("nan")))
            measured = (closed, float(loss), accuracy)
            self.report(dict(metrics or {}, loss=float(loss)))
            self.done["rounds"] = closed
            self.log(f"round {closed}  {self.seconds():.1f} s  test loss {loss:.4f}  "
                     f"test accuracy {accuracy:.4f}")
            if finished:  # the last measurement to the rounds log; answered at once
                self.c.await_rounds_closed(closed, measured)
                return self.done
            next_ = (closed // every + 1) * every


def run_client(client, scheduler="", rank=None, log=None, scenario=None):
    """Runs `client` (or what the factory `client(scenario)` makes once the client has joined)
    as one federated client until the run's rounds are done; returns a dict of what it did
    (rounds, kept, failed, abandoned, and the last round's numeric metrics). `scheduler`
    defaults to $HETPS_SCHEDULER and `rank` to the scenario's or $HETPS_RANK; `scenario`
    (hetps.scenario.Scenario) is the emulation it runs under (none by default)."""
    log = log or (lambda line: print(line, flush=True))
    scenario = scenario or Scenario({}, rank)
    # The program's --scheduler (hetps launch gives a client in a network namespace the
    # proxy's address there), else $HETPS_SCHEDULER.
    scheduler = scheduler or scenario.flags.get("scheduler", "")
    rank = scenario.rank if scenario.rank >= 0 else None
    push_codec, pull_codec = scenario.flags["codec"], scenario.flags["pull_codec"]
    with Client(scheduler, rank=rank, push_codec=push_codec, pull_codec=pull_codec,
                link=scenario.link, device_slowdown=scenario.slowdown,
                virtual_clock=scenario.virtual) as c:
        scenario.rank = c.rank
        scenario.clients = c.num_workers - scenario.evaluators
        if scenario.clients < 1:
            raise ValueError(f"{scenario.evaluators} evaluators leave no training client among "
                             f"{c.num_workers} workers")
        run = _Run(c, _make(client, scenario), scenario, log)
        if run.attacker and run.attacker.changes_labels and not scenario.labels_taken:
            raise RuntimeError(
                f"client {c.rank} is a {run.attacker.spec} attacker, which trains on changed "
                "labels: its constructor must take its training labels through "
                "scenario.labels(y, classes) (examples/federated/torch_client.py does)")
        if scenario.evaluator and not hasattr(run.client, "evaluate"):
            raise ValueError(f"client {c.rank} is an evaluator (--evaluators="
                             f"{scenario.evaluators}) but the client has no evaluate()")
        run.declare()
        done = run.evaluate() if scenario.evaluator else run.train()
        c.barrier()  # as the C++ clients end: rank 0 of a mixed run merges after it
        return done


def partition(labels, parts, scheme="iid", alpha=0.5, shards_per_client=2, seed=1,
              classes=None):
    """The sample indices of each of `parts` clients, split as the C++ edge clients split their
    data set (`--partition=iid|dirichlet|shards`, `--dirichlet_alpha`, `--shards_per_client`,
    `--data_seed`): client r of a scenario trains on partition(...)[r] in either language."""
    labels = np.asarray(labels, dtype=np.int32)
    classes = int(labels.max()) + 1 if classes is None else classes
    split = _split_samples(labels.tolist(), classes, parts, scheme, alpha, shards_per_client,
                           seed)
    return [np.asarray(s, dtype=np.int64) for s in split]


def parameters_of(module):
    """A torch nn.Module's float32 state as fit's parameters: {name: array} sharing the module's
    memory on the CPU (no copy; a GPU module's are copied to the host). Other state (int
    counters such as BatchNorm's num_batches_tracked) stays local to the client."""
    import torch
    return {n: t.detach().cpu().numpy() for n, t in module.state_dict().items()
            if t.dtype == torch.float32}


def load_parameters(module, parameters):
    """Copies `parameters` (as parameters_of names them) into the module's state, in place."""
    import torch
    state = module.state_dict()
    with torch.no_grad():
        for name, value in parameters.items():
            if name not in state:
                raise ValueError(f"the module has no parameter {name!r}")
            state[name].copy_(torch.from_numpy(np.asarray(value)).reshape(state[name].shape))


def _pool_ranks(first):
    """The ranks this process hosts: $HETPS_RANKS ("a-b", both included: hetps launch
    --workers_per_process), else its own."""
    spec = os.environ.get("HETPS_RANKS", "")
    if not spec:
        return [first]
    try:
        a, b = (int(x) for x in spec.split("-"))
    except ValueError:
        raise ValueError(f"HETPS_RANKS must be 'first-last', got '{spec}'") from None
    return list(range(a, b + 1))


def run_pool(make_client, scenario, ranks, log=None):
    """Hosts the logical clients `ranks` in this process, one thread each, every one a separate
    participant (its own connection, identity, link, availability and data); returns
    {rank: result or the exception it ended with}."""
    results = {}

    def one(r):
        try:
            results[r] = run_client(make_client, scenario=scenario.for_rank(r), log=log)
        except Exception as e:  # noqa: BLE001 - the others go on; main reports it
            results[r] = e

    # Daemon threads: SIGINT ends the process (hetps launch stops it so) without waiting on
    # clients blocked in the cluster.
    threads = [threading.Thread(target=one, args=(r,), name=f"client-{r}", daemon=True)
               for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main(make_client, argv=None):
    """For a client program: `hetps.fed.main(MyClient)` builds each client of this process
    with MyClient(scenario) (hetps.scenario.Scenario: the rank, the partition, the local
    training settings) and runs it under the scenario's emulation, from the flags the program
    was started with (hetps fed run --client_cmd gives the scenario's). A process started for
    several ranks ($HETPS_RANKS) runs them as a pool. Exits 0 when the run's rounds are done."""
    scenario = Scenario.from_argv(argv)
    ranks = _pool_ranks(scenario.rank)
    try:
        results = run_pool(make_client, scenario, ranks)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return 130
    failed = 0
    for r, done in sorted(results.items()):
        if isinstance(done, Exception):
            failed += 1
            print(f"client {r}: {type(done).__name__}: {done}", file=sys.stderr, flush=True)
            continue
        last = "".join(f", last {k} {v:.4g}" for k, v in done["metrics"].items())
        print(f"client {r}: {done['rounds']} rounds, {done['kept']} kept, {done['failed']} "
              f"failed, {done['abandoned']} abandoned{last}", file=sys.stderr, flush=True)
    return 1 if failed else 0
