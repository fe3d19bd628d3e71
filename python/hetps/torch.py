"""hetps.torch: train a torch.nn.Module through the hetps servers.

    client = hetps.Client()                       # $HETPS_SCHEDULER, $HETPS_RANK (hetps launch)
    opt = hetps.torch.DistributedOptimizer(model, client, weight=batch_size)
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()          # each gradient is pushed as soon as backward has produced it
        opt.step()               # waits for the pushes, clocks, starts pulling the parameters

The servers own the optimizer (hetps-server --optimizer=sgd:lr=0.1, adam:lr=0.001, ...): step()
does not update the parameters itself, it replaces them with the servers' values. One tensor is
declared per parameter, named as in model.named_parameters(), its layer the index of the module
that owns it in module order (per-layer codecs, "default=topk:density=0.01;layer0=none", and the
scheduler's per-layer policies see those layers). Pushes of the layers backward reaches first
(the last ones) go out while backward still computes the earlier ones; the pulls started by
step() are waited for just before the next forward pass (a forward pre-hook), so they overlap
with whatever the trainer does between steps. Gradients are pushed from the parameters' own
.grad memory and parameters pulled into their own memory: no copies. Use one backward pass per
step.

Sparse features live in hetps tables (docs/tables.md): hetps.torch.EmbeddingBag is an
nn.EmbeddingBag(sparse=True) whose rows are a table's. Make them before the optimizer (their
tables join its declaration):

    emb = hetps.torch.EmbeddingBag(client, "user_id", 16, mode="sum", optimizer="adagrad:lr=0.05")
    model = torch.nn.Sequential(...)              # the dense layers, using emb's output
    opt = hetps.torch.DistributedOptimizer(model, client, embeddings=[emb])
"""
import numpy as np
import torch

from . import Client, wait_all


def _layers(model):
    """Parameter name -> index of its module among the modules that own parameters."""
    owners = {}
    for name, _ in model.named_parameters():
        module = name.rsplit(".", 1)[0] if "." in name else ""
        owners.setdefault(module, len(owners))
    return {name: owners[name.rsplit(".", 1)[0] if "." in name else ""]
            for name, _ in model.named_parameters()}


class DistributedOptimizer:
    """Pushes a model's gradients to hetps servers and pulls its parameters from them.

    model: a torch.nn.Module on the CPU, float32 parameters.
    client: a hetps.Client (or None: one is made from client_args, e.g. scheduler=...,
        push_codec="topk:density=0.01,ef=1").
    weight: the samples behind each push (the batch size), for weighting aggregators.
    init: offer this model's initial parameters to the servers (the first offer of each
        partition wins; servers run with --init=worker), then pull the servers' values.
    """

    def __init__(self, model, client=None, weight=1.0, init=True, embeddings=(), **client_args):
        self.client = client if client is not None else Client(**client_args)
        self.weight = float(weight)
        # Tables' modules, in the model or beside it: step() waits for their pushes too.
        self.embeddings = list(embeddings) + [m for m in model.modules()
                                              if isinstance(m, EmbeddingBag)
                                              and m not in list(embeddings)]
        layer = _layers(model)
        self.params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        for name, p in self.params:
            if p.dtype != torch.float32 or p.device.type != "cpu" or not p.is_contiguous():
                raise ValueError(f"hetps.torch: parameter {name} must be a contiguous float32 "
                                 f"CPU tensor (it is {p.dtype} on {p.device})")
        self.client.declare([(n, tuple(p.shape), layer[n]) for n, p in self.params])
        if init:
            wait_all([self.client.init(n, p.detach()) for n, p in self.params])
        self._pushes = {}
        self._pulls = []
        self._hooks = []
        self._accumulators = []  # kept alive: their hooks fire when a gradient is ready
        for name, p in self.params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append(acc.register_hook(self._pusher(name, p)))
            self._accumulators.append(acc)
        self._hooks.append(model.register_forward_pre_hook(lambda m, i: self.synchronize()))
        self.pull()
        self.synchronize()

    def _pusher(self, name, p):
        def hook(*_):
            if name in self._pushes:
                raise RuntimeError(f"hetps.torch: a second backward pass reached {name} before "
                                   "step(); use one backward pass per step")
            self._pushes[name] = self.client.push(name, p.grad, self.weight)
        return hook

    def pull(self):
        """Starts pulling every parameter into its own memory (step() does it)."""
        self._pulls = [self.client.pull_all([(n, p.detach()) for n, p in self.params])]

    def synchronize(self):
        """Waits for the parameters step() started pulling (the forward pass does it)."""
        pulls, self._pulls = self._pulls, []
        wait_all(pulls)

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients in place (their memory is what the next pushes send)."""
        for _, p in self.params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_()
                    p.grad.zero_()

    def step(self):
        """Pushes what the hooks have not pushed, waits for every push, ends the iteration
        (client.clock()) and starts pulling the parameters."""
        for name, p in self.params:
            if name not in self._pushes and p.grad is not None:
                self._pushes[name] = self.client.push(name, p.grad, self.weight)
        pushes, self._pushes = list(self._pushes.values()), {}
        wait_all(pushes)
        for e in self.embeddings:
            e.synchronize()
        self.client.clock()
        self.pull()

    def close(self):
        """Waits for what is in flight and removes the hooks (the client stays open)."""
        self.synchronize()
        wait_all(self._pushes.values())
        self._pushes = {}
        for h in self._hooks:
            h.remove()
        self._hooks = []


class EmbeddingBag(torch.nn.Module):
    """nn.EmbeddingBag(sparse=True) over a hetps table: rows of `dim` float32 keyed by any
    int64 id, created on the servers at their first push.

    forward(ids, offsets=None, per_sample_weights=None) takes what F.embedding_bag takes (ids of
    any values: they are keys, not indices). It pulls the rows of the batch's unique ids (or
    takes those prefetch() started), computes the bags from them, and when backward reaches
    them pushes their gradient rows (the servers' or the table's optimizer applies them), so
    the push overlaps with backward through the layers before. step() of a DistributedOptimizer
    over the model waits for those pushes before it clocks; without one, call synchronize().

    client: a hetps.Client, before its declare(). name, dim and table options
    (max_rows, eviction, min_count, ttl_seconds, ttl_clocks, init, init_scale, seed,
    optimizer, layer): as Client.declare_table.
    """

    def __init__(self, client, name, dim, mode="sum", **table_options):
        super().__init__()
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"hetps.torch.EmbeddingBag: mode {mode!r} is not sum, mean or max")
        self.client, self.name, self.dim, self.mode = client, name, int(dim), mode
        client.declare_table(name, self.dim, **table_options)
        self._prefetched = None  # (ids, unique, inverse, rows, ticket)
        self._pushes = []

    def _start(self, ids):
        ids = ids.detach().to("cpu", torch.int64).contiguous()
        unique, inverse = torch.unique(ids, return_inverse=True)
        rows = np.empty((unique.numel(), self.dim), np.float32)
        ticket = self.client.pull_rows(self.name, unique.numpy(), rows)
        return ids, unique, inverse, rows, ticket

    def prefetch(self, ids):
        """Starts pulling the rows of `ids` (the next batch) while other work goes on."""
        self._prefetched = self._start(ids)

    def forward(self, ids, offsets=None, per_sample_weights=None):
        p = self._prefetched
        self._prefetched = None
        if p is None or not torch.equal(p[0], ids.detach().to("cpu", torch.int64)):
            p = self._start(ids)
        _, unique, inverse, rows, ticket = p
        ticket.wait()
        weight = torch.from_numpy(rows).requires_grad_()
        keys = unique.numpy()

        def push(grad):
            g = np.ascontiguousarray(grad.detach().to(torch.float32).numpy())
            self._pushes.append(self.client.push_rows(self.name, keys, g))

        weight.register_hook(push)
        return torch.nn.functional.embedding_bag(inverse.reshape(ids.shape), weight, offsets,
                                                 mode=self.mode,
                                                 per_sample_weights=per_sample_weights)

    def synchronize(self):
        """Waits for the gradient rows backward pushed."""
        pushes, self._pushes = self._pushes, []
        wait_all(pushes)
