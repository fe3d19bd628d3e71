#!/usr/bin/env python3
"""deploy/docker/docker-compose.yml is valid Compose (Debian's docker-compose parses it, with and
without the edge profile) and every hetps command in it passes its daemon's --check_flags: a
renamed or misspelt flag fails here, not in a user's cluster. Exit 77 (skipped) without
docker-compose. Usage: compose_test.py SOURCE_DIR BIN_DIR"""
import os
import re
import shlex
import shutil
import subprocess
import sys

import yaml

from deploy_check import check_flags, finish

source, bindir = sys.argv[1], sys.argv[2]
compose = os.path.join(source, "deploy/docker/docker-compose.yml")
if shutil.which("docker-compose") is None:
    print("skipped: docker-compose is not installed (install_deps.sh --tests installs it)")
    sys.exit(77)

failures = []
for profile in ([], ["--profile", "edge"]):
    r = subprocess.run(["docker-compose", "-f", compose, *profile, "config", "-q"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"docker-compose config {profile}: {r.stderr.strip()}")
config = yaml.safe_load(subprocess.run(
    ["docker-compose", "-f", compose, "--profile", "edge", "config"], capture_output=True,
    text=True, check=True).stdout)
services = config["services"]

# What the file promises: servers keep state on a volume and come back after a crash; ranks come
# from the scheduler, so servers and workers scale; Prometheus and the dashboard are published.
expect = {
    "server restarts on failure": services["server"].get("restart") == "on-failure",
    "server has a data volume": any(":/data" in str(v) or (isinstance(v, dict) and
                                    v.get("target") == "/data")
                                    for v in services["server"].get("volumes", [])),
    "servers and workers are scaled, not listed": all(
        s in services for s in ("server", "worker")) and "server1" not in services,
    "dashboard port published": any("8080" in str(p) for p in
                                    services["scheduler"].get("ports", [])),
    "prometheus present": "prometheus" in services,
    "edge clients may shape their link": "NET_ADMIN" in services["edge-client"].get(
        "cap_add", []),
}
# The image's package is made by deploy/package.sh, as InstallTest makes it on CI's tree: a
# target list of the Dockerfile's own once left the Python module unbuilt and cpack failed.
with open(os.path.join(source, "deploy/docker/Dockerfile")) as f:
    dockerfile = f.read()
expect["the image's build runs deploy/package.sh"] = "RUN deploy/package.sh" in dockerfile
expect["the Dockerfile builds nothing by its own list"] = not re.search(
    r"\b(ninja|cmake --build|cpack|make)\b", re.sub(r"#.*", "", dockerfile))
failures += [f"expected: {what}" for what, ok in expect.items() if not ok]

checked = 0
for name, service in services.items():
    command = service.get("command")
    if not command:
        continue
    args = list(command) if isinstance(command, list) else shlex.split(command)
    if args[:2] == ["sh", "-c"]:  # the exec'd daemon of a shell wrapper
        script = re.sub(r"\$\([^)]*\)", "x", args[2])  # $(hostname) and the like
        args = shlex.split(script[script.index("exec ") + 5:])
        if args[0] == "setpriv":
            args = args[next(i for i, a in enumerate(args) if a.startswith("hetps")):]
    if not args[0].startswith("hetps-"):
        continue
    env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
    if env.get("HETPS_AUTH") != "curve" or not env.get("HETPS_KEY"):
        failures.append(f"{name}: does not run with HETPS_AUTH=curve and its role's HETPS_KEY")
    checked += 1
    if (error := check_flags(bindir, args, env)) is not None:
        failures.append(f"{name}: {error}")

finish(failures, checked, 6, f"{len(services)} services")
