"""Federated clients in Python (docs/federated.md).

A client is any object with

    get_parameters(config) -> {name: float32 array}      the model's initial parameters
    fit(parameters, config) -> (parameters, num_samples, metrics)

`fit` gets the global model of its round and returns the model it trained locally, how many
samples it trained on (the upload's weight) and a dict of figures. `run_client(client)` joins
the cluster, declares the model (every client alike; the first offer of each tensor is its
initial value), and then repeats until the run's rounds are done: wait to be selected (or for a
concurrency slot), pull the global model, call fit, upload the delta (global - local, what the
servers' aggregators apply) weighted by num_samples, report it, and report the metrics.

    import numpy as np, hetps.fed

    class Mean:
        def __init__(self, data): self.data = data
        def get_parameters(self, config): return {"w": np.zeros(4, np.float32)}
        def fit(self, parameters, config):
            return {"w": self.data.mean(0).astype(np.float32)}, len(self.data), {}

    hetps.fed.run_client(Mean(np.random.rand(100, 4)))

`config` holds "round" (the round, or in asynchronous modes the upload's base version) and
"rank". An exception raised by fit fails the client's round only: its traceback is printed,
nothing of the round is uploaded (the round closes without it, as for a client that drops
out), and the client asks for the next one. What fit returns is checked: a missing or unknown
parameter, another shape or a dtype other than float32 raises ValueError naming it.
"""
import sys
import traceback

import numpy as np

from ._hetps import Client
from ._hetps import split_samples as _split_samples


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


def run_client(client, scheduler="", rank=None, log=None):
    """Runs `client` as one federated client until the run's rounds are done; returns a dict
    of what it did (rounds, kept, failed, and the last round's numeric metrics). `scheduler` defaults to $HETPS_SCHEDULER and `rank`
    to $HETPS_RANK (as hetps launch sets them)."""
    log = log or (lambda line: print(line, flush=True))
    with Client(scheduler, rank=rank) as c:
        offered = client.get_parameters({})
        model = _checked(offered, {n: np.asarray(a) for n, a in dict(offered).items()},
                         "get_parameters")
        c.declare([(name, a.shape, layer) for layer, (name, a) in enumerate(model.items())])
        for name, a in model.items():
            c.init(name, a).wait()
        if not c.runs_rounds:
            raise RuntimeError("the servers run no federated rounds: start them with "
                               "--consistency=selected or committed (hetps fed run does)")
        done = {"rounds": 0, "kept": 0, "failed": 0, "metrics": {}}
        global_model = {name: np.empty_like(a) for name, a in model.items()}
        while True:
            round_ = c.await_round()
            if round_ < 0:
                break
            c.pull_all(global_model).wait()
            config = {"round": round_, "rank": c.rank}
            try:
                result = client.fit({n: a.copy() for n, a in global_model.items()}, config)
            except Exception:  # the client's round fails; the run goes on
                done["failed"] += 1
                log(f"client {c.rank}: fit raised in round {round_}; nothing uploaded:\n"
                    + traceback.format_exc().rstrip())
                continue
            parameters, num_samples, metrics = _fit_result(result)
            local = _checked(parameters, global_model, "fit's parameters")
            deltas = {n: global_model[n] - local[n] for n in global_model}
            c.push_all(deltas, weight=float(num_samples)).wait()
            done["kept"] += bool(c.finish_round())
            done["rounds"] += 1
            figures = {k: float(v) for k, v in metrics.items()
                       if isinstance(v, (int, float, np.number))}
            if figures:
                c.report_metrics(figures)
                done["metrics"] = figures
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


def main(make_client):
    """For a client program: `hetps.fed.main(lambda rank: MyClient(rank))` builds the client of
    this process's rank ($HETPS_RANK) and runs it; exits 0 when the run's rounds are done."""
    import os
    rank = int(os.environ.get("HETPS_RANK", "-1"))
    done = run_client(make_client(rank), rank=None if rank < 0 else rank)
    last = "".join(f", last {k} {v:.4g}" for k, v in done["metrics"].items())
    print(f"client {rank}: {done['rounds']} rounds, {done['kept']} kept, {done['failed']} "
          f"failed{last}", file=sys.stderr, flush=True)
    return 0
