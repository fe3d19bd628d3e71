"""hetps: the worker client of the hetps parameter server, for Python.

    import numpy as np, hetps
    with hetps.Client("tcp://127.0.0.1:7000") as c:       # joins the cluster
        c.declare([("w", (1024,), 0)])                     # collective over all workers
        w = np.zeros(1024, np.float32)
        c.pull("w", w).wait()                              # w holds the server's values
        c.push("w", np.ones(1024, np.float32)).wait()      # the server applies its optimizer
        c.clock()                                          # end of one iteration

Arrays (float32 numpy arrays, CPU or CUDA torch tensors) are sent from and written into their own
memory; hetps holds each until its ticket is done. Errors raise hetps.Error subclasses.
hetps.torch.DistributedOptimizer trains a torch.nn.Module through the servers.
"""
import os

from ._hetps import (  # noqa: F401
    Aborted,
    Attacker,
    Client,
    DeadlineExceeded,
    Error,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    LayerAccumulator,
    NotFound,
    PermissionDenied,
    RunLog,
    SecureUpload,
    Ticket,
    Unavailable,
    finish_run,
    is_byzantine,
)

__all__ = [
    "Aborted", "Attacker", "Client", "DeadlineExceeded", "Error", "FailedPrecondition", "Internal",
    "InvalidArgument", "LayerAccumulator", "NotFound", "PermissionDenied", "RunLog", "SecureUpload",
    "Ticket",
    "Unavailable", "finish_run", "is_byzantine", "local_rank", "wait_all",
]


def local_rank():
    """This worker's index among the workers on its host: $HETPS_LOCAL_RANK (hetps launch sets
    it, across hosts too), else $SLURM_LOCALID, else $HETPS_RANK, else 0. A GPU worker computes on GPU local_rank()
    mod the visible GPUs (hetps.torch.local_device() says which), as hetps-worker does."""
    for variable in ("HETPS_LOCAL_RANK", "SLURM_LOCALID", "HETPS_RANK"):
        value = os.environ.get(variable, "")
        if value:
            try:
                return max(0, int(value))
            except ValueError:
                raise InvalidArgument(f"{variable} is not an integer: '{value}'") from None
    return 0


def wait_all(tickets):
    """Waits for every ticket (all of them, even after an error); raises the first error."""
    first = None
    for t in tickets:
        try:
            t.wait()
        except Error as e:  # keep waiting: the arrays stay in use until each is done
            first = first or e
    if first is not None:
        raise first
