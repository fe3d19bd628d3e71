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

A model on a GPU works the same way (all its parameters on one device; hetps.torch.local_device()
picks it by local rank): each gradient is encoded on the device by the push codec's CUDA twin, or
copied once to pinned host memory when raw, on hetps' own stream after the work torch queued,
while backward goes on; pulls land in pinned memory and are copied to the parameters on torch's
current stream by the forward pre-hook.

The scheduler's layer-wise push schedule (hetps-scheduler --layer_schedule, docs/layer-schedules.md)
is followed: a layer whose period is P is pushed once every P steps, its gradients of the steps
between summed in a tensor of its own (on the gradient's device) and pushed with them, or their
mean under combine=mean; nothing is dropped. Every tenth step the layers' gradient and weight
norms go to the scheduler (the adaptive schedule's measure).

Sparse features live in hetps tables (docs/tables.md): hetps.torch.EmbeddingBag is an
nn.EmbeddingBag(sparse=True) whose rows are a table's. Make them before the optimizer (their
tables join its declaration):

    emb = hetps.torch.EmbeddingBag(client, "user_id", 16, mode="sum", optimizer="adagrad:lr=0.05")
    model = torch.nn.Sequential(...)              # the dense layers, using emb's output
    opt = hetps.torch.DistributedOptimizer(model, client, embeddings=[emb])
"""
import numpy as np
import torch

from . import Client, local_rank, wait_all


def local_device(rank=None):
    """The device this worker should compute on: cuda:(local rank mod the visible GPUs) when
    torch sees a GPU (CUDA_VISIBLE_DEVICES respected), else cpu; the choice is logged.
    rank: the local rank (default hetps.local_rank())."""
    rank = local_rank() if rank is None else rank
    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    device = torch.device("cuda", rank % count)
    print(f"local rank {rank} takes GPU {device.index} of the {count} visible "
          f"({torch.cuda.get_device_name(device)})", flush=True)
    return device


def _layers(model):
    """Parameter name -> index of its module among the modules that own parameters."""
    owners = {}
    for name, _ in model.named_parameters():
        module = name.rsplit(".", 1)[0] if "." in name else ""
        owners.setdefault(module, len(owners))
    return {name: owners[name.rsplit(".", 1)[0] if "." in name else ""]
            for name, _ in model.named_parameters()}


class _LayerSchedule:
    """The scheduler's layer-wise push schedule for one model's parameters (the C++
    hetps::LayerAccumulator's rules): begin_step() counts a step for every layer and marks due
    those whose counted steps reach their period; offer() gives what to push for a gradient, or
    None when its layer is not due (the gradient is then added to the parameter's sum)."""

    MEASURE_EVERY = 10

    def __init__(self, client, layer_of):
        self.client = client
        self.layer_of = layer_of
        self.counted = {layer: 0 for layer in set(layer_of.values())}
        self.due = {layer: True for layer in self.counted}
        self.deferred = {layer: 0 for layer in self.counted}
        self.sums = {}
        self.mean = False
        self.steps = 0

    def begin_step(self):
        schedule = self.client.layer_schedule()
        periods, self.mean = schedule["periods"], schedule["mean"]
        for layer in self.counted:
            if self.due[layer]:
                self.counted[layer] = 0
            self.counted[layer] += 1
            period = periods[layer] if layer < len(periods) else 1
            self.due[layer] = self.counted[layer] >= max(period, 1)

    def steps_of(self, name):
        """Steps a push of this parameter's gradient carries now."""
        return self.counted[self.layer_of[name]]

    def offer(self, name, grad):
        layer = self.layer_of[name]
        held = self.sums.get(name)
        if not self.due[layer]:
            if held is None:
                self.sums[name] = grad.detach().clone()
            else:
                held.add_(grad)
            self.deferred[layer] += grad.numel() * grad.element_size()
            return None
        steps = self.counted[layer]
        if held is None and not (self.mean and steps > 1):
            return grad
        out = grad.detach() + held if held is not None else grad.detach().clone()
        self.sums.pop(name, None)
        if self.mean and steps > 1:
            out.div_(steps)
        return out

    def report(self, params):
        """Each layer's figures of this step for the scheduler (norms every MEASURE_EVERY)."""
        norms = {}
        if self.steps % self.MEASURE_EVERY == 0:
            for name, p in params:
                if p.grad is None:
                    continue
                g, w = norms.get(self.layer_of[name], (0.0, 0.0))
                norms[self.layer_of[name]] = (g + float(p.grad.detach().square().sum()),
                                              w + float(p.detach().square().sum()))
        for layer in self.counted:
            g, w = norms.get(layer, (-1.0, -1.0))
            self.client.report_layer(layer, g, w, self.deferred[layer])
        self.steps += 1


class DistributedOptimizer:
    """Pushes a model's gradients to hetps servers and pulls its parameters from them.

    model: a torch.nn.Module with float32 parameters, on the CPU or on one GPU.
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
            if (p.dtype != torch.float32 or p.device.type not in ("cpu", "cuda")
                    or not p.is_contiguous() or p.device != self.params[0][1].device):
                raise ValueError(f"hetps.torch: parameter {name} must be a contiguous float32 "
                                 f"tensor on the CPU or a GPU, every parameter on the same device "
                                 f"(it is {p.dtype} on {p.device})")
        self.client.declare([(n, tuple(p.shape), layer[n]) for n, p in self.params])
        self.client.set_device(str(self.params[0][1].device) if self.params else "cpu")
        if init:
            wait_all([self.client.init(n, p.detach()) for n, p in self.params])
        self._schedule = _LayerSchedule(self.client, {n: layer[n] for n, _ in self.params})
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
            self._push(name, p.grad)
        return hook

    def _push(self, name, grad):
        """Pushes what the layer-wise schedule says for this gradient (None: accumulated)."""
        if not self._pushes:  # the step's first gradient: the schedule as it stands now
            self._schedule.begin_step()
        steps = self._schedule.steps_of(name)
        g = self._schedule.offer(name, grad)
        self._pushes[name] = None if g is None else self.client.push(name, g, self.weight * steps)

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
                self._push(name, p.grad)
        wait_all([t for t in self._pushes.values() if t is not None])
        for e in self.embeddings:
            e.synchronize()
        if self._pushes:
            self._schedule.report(self.params)
        self._pushes = {}
        self.client.clock()
        self.pull()

    def close(self):
        """Waits for what is in flight and removes the hooks (the client stays open)."""
        self.synchronize()
        wait_all([t for t in self._pushes.values() if t is not None])
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
        # Rows live in host memory (the table's); a GPU model's bags are computed on its device.
        weight = torch.from_numpy(rows).to(ids.device).requires_grad_()
        keys = unique.numpy()

        def push(grad):
            g = np.ascontiguousarray(grad.detach().to("cpu", torch.float32).numpy())
            self._pushes.append(self.client.push_rows(self.name, keys, g))

        weight.register_hook(push)
        bags = inverse.reshape(ids.shape).to(ids.device)
        return torch.nn.functional.embedding_bag(bags, weight, offsets, mode=self.mode,
                                                 per_sample_weights=per_sample_weights)

    def synchronize(self):
        """Waits for the gradient rows backward pushed."""
        pushes, self._pushes = self._pushes, []
        wait_all(pushes)
