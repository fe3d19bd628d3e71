#!/usr/bin/env python3
"""The daemons as their systemd units run them (deploy/systemd/):
- every unit passes `systemd-analyze verify` (its binaries pointed at this build), and a unit
  with a mistake does not, so the check can fail;
- the daemons take every flag from HETPS_* variables only, as the units' EnvironmentFile= gives
  them, and speak systemd's readiness protocol for real: each is started with its own
  NOTIFY_SOCKET (a datagram socket this test owns, as systemd's is for a Type=notify unit) and
  must send READY=1 exactly when the units promise (the scheduler once it listens, a server, an
  aggregator and a worker once they joined the cluster), then STOPPING=1 when it shuts down.
Everything lives in one scratch folder, removed at the end, also on failure.
Usage: systemd_test.py SOURCE_DIR BIN_DIR"""
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

source, bin_dir = sys.argv[1], os.path.abspath(sys.argv[2])
scratch = tempfile.mkdtemp(prefix="hetps-systemd-")
processes = []


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def verify(units):
    r = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True,
                       cwd=scratch)
    return r.returncode, (r.stdout + r.stderr).strip()


def check_units():
    if shutil.which("systemd-analyze") is None:
        print("SKIP: systemd-analyze verify (no systemd-analyze here)")
        return
    names = []
    for unit in sorted(glob.glob(os.path.join(source, "deploy/systemd/*.service"))):
        with open(unit) as f:
            text = f.read().replace("/usr/bin/", bin_dir + "/")
        name = os.path.basename(unit)
        with open(os.path.join(scratch, name), "w") as f:
            f.write(text)
        names.append(name)
    if len(names) != 4:
        fail(f"expected the scheduler's, servers', workers' and aggregator's units, found {names}")
    # Templates are checked as instances, the way systemctl starts them.
    instances = [n.replace("@.", "@0.") for n in names]
    for template, instance in zip(names, instances):
        if template != instance:
            shutil.copy(os.path.join(scratch, template), os.path.join(scratch, instance))
    code, out = verify(["./" + n for n in instances])
    if code != 0 or out:
        fail(f"systemd-analyze verify: exit {code}: {out}")
    with open(os.path.join(scratch, names[0])) as f:
        broken = f.read().replace("Type=notify", "Type=notifi")
    broken = broken.replace(bin_dir + "/", "/nonexistent/")
    with open(os.path.join(scratch, "broken.service"), "w") as f:
        f.write(broken)
    code, out = verify(["./broken.service"])
    if code == 0 and not out:
        fail("systemd-analyze verify accepted a broken unit: the check cannot fail")
    print(f"PASS: systemd-analyze verify {' '.join(instances)}")


def notify_socket(name):
    path = os.path.join(scratch, name + ".notify")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(0.2)
    return s, path


def receive(sock):
    try:
        return sock.recv(4096).decode()
    except socket.timeout:
        return None


def start(name, binary, env):
    sock, path = notify_socket(name)
    full = {k: v for k, v in os.environ.items() if not k.startswith("HETPS_")}
    full.update(env)
    full["NOTIFY_SOCKET"] = path
    log = open(os.path.join(scratch, name + ".log"), "w")
    p = subprocess.Popen([os.path.join(bin_dir, binary)], env=full, stdout=log,
                         stderr=subprocess.STDOUT)
    processes.append(p)
    return p, sock


def expect(sock, prefix, name, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        message = receive(sock)
        if message is not None:
            if not message.startswith(prefix):
                fail(f"{name} told systemd {message!r}, expected {prefix!r}")
            return message
    with open(os.path.join(scratch, name + ".log")) as f:
        fail(f"{name} never told systemd {prefix!r}; its log:\n{f.read()}")


def quiet(sock, name, what):
    message = receive(sock)
    if message is not None:
        fail(f"{name} told systemd {message!r} before {what}")


def check_readiness():
    endpoint_file = os.path.join(scratch, "endpoint")
    common = {"HETPS_LOG_LEVEL": "info"}
    scheduler, s_sock = start("scheduler", "hetps-scheduler", {
        **common, "HETPS_NUM_SERVERS": "1", "HETPS_NUM_WORKERS": "1", "HETPS_AGGREGATORS": "1",
        "HETPS_ENDPOINT_FILE": endpoint_file, "HETPS_DATA_DIR": os.path.join(scratch, "sched")})
    ready = expect(s_sock, "READY=1", "the scheduler")
    with open(endpoint_file) as f:
        endpoint = f.read().strip()
    if "STATUS=listening on " + endpoint not in ready:
        fail(f"the scheduler's readiness {ready!r} does not say where it listens ({endpoint})")
    peer = {**common, "HETPS_SCHEDULER": endpoint}
    server, v_sock = start("server", "hetps-server", {
        **peer, "HETPS_INIT": "worker", "HETPS_OPTIMIZER": "sgd:lr=0.1",
        "HETPS_DATA_DIR": os.path.join(scratch, "server-0")})
    aggregator, a_sock = start("aggregator", "hetps-aggregator", peer)
    time.sleep(1)
    quiet(v_sock, "the server", "the cluster formed (no worker yet)")
    quiet(a_sock, "the aggregator", "the cluster formed (no worker yet)")
    worker, w_sock = start("worker", "hetps-worker", {
        **peer, "HETPS_RANK": "0", "HETPS_WORKLOAD": "synthetic", "HETPS_ITERATIONS": "20",
        "HETPS_TENSOR_ELEMENTS": "1000"})
    expect(v_sock, "READY=1\nSTATUS=joined as server 0: 1 servers, 1 workers", "the server")
    expect(a_sock, "READY=1\nSTATUS=joined as aggregator 0: 1 workers of this host", "the aggregator")
    expect(w_sock, "READY=1\nSTATUS=joined as worker 0 of 1", "the worker")
    expect(w_sock, "STOPPING=1", "the worker")
    if worker.wait(timeout=60) != 0:
        fail(f"the worker exited {worker.returncode}")
    expect(v_sock, "STOPPING=1", "the server")  # the last worker's leaving ends the run
    expect(a_sock, "STOPPING=1", "the aggregator")
    scheduler.terminate()
    expect(s_sock, "STOPPING=1", "the scheduler")
    for name, p in (("server", server), ("aggregator", aggregator), ("scheduler", scheduler)):
        if p.wait(timeout=30) != 0:
            fail(f"the {name} exited {p.returncode}")
    print("PASS: READY=1 from the scheduler listening, the server, the aggregator and the worker "
          "joined; STOPPING=1 from each")


try:
    check_units()
    check_readiness()
finally:
    for p in processes:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(scratch, ignore_errors=True)
