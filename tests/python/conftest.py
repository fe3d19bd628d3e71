"""A live local cluster for the Python module's tests: a scheduler and servers from
$HETPS_BIN_DIR (ctest sets it, and PYTHONPATH to the build tree's python/)."""
import os
import subprocess
import tempfile
import time

import pytest

BIN = os.environ.get("HETPS_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))


class Cluster:
    def __init__(self, workers, servers=2, server_flags=(), scheduler_flags=(), aggregators=0,
                 aggregator_flags=()):
        self.dir = tempfile.mkdtemp(prefix="hetps-pytest-")
        ep = os.path.join(self.dir, "endpoint")
        self.procs = []
        self.logs = []
        self._start("scheduler", [f"--num_workers={workers}", f"--num_servers={servers}",
                                  f"--aggregators={aggregators}", f"--endpoint_file={ep}",
                                  *scheduler_flags])
        deadline = time.time() + 30
        while not (os.path.exists(ep) and open(ep).read().strip()):
            if time.time() > deadline or self.procs[0].poll() is not None:
                raise RuntimeError("the scheduler did not start: " + self.log(0))
            time.sleep(0.02)
        self.endpoint = open(ep).read().strip()
        for i in range(servers):
            self._start(f"server{i}", [f"--scheduler={self.endpoint}", *server_flags])
        # Aggregators (docs/aggregation-tier.md) after the servers: log index servers + 1 + i.
        for i in range(aggregators):
            self._start(f"aggregator{i}", [f"--scheduler={self.endpoint}", *aggregator_flags])

    def _start(self, name, flags):
        binary = ("hetps-scheduler" if name == "scheduler" else
                  "hetps-aggregator" if name.startswith("aggregator") else "hetps-server")
        log = open(os.path.join(self.dir, name + ".log"), "w")
        self.logs.append(log.name)
        self.procs.append(subprocess.Popen([os.path.join(BIN, binary), *flags], stdout=log,
                                           stderr=subprocess.STDOUT))

    def log(self, i):
        return open(self.logs[i]).read()

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def cluster(request):
    """cluster(workers=1, servers=2, server_flags=[...]) starts one; stopped after the test."""
    made = []

    def make(workers=1, **kw):
        c = Cluster(workers, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
