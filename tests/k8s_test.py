#!/usr/bin/env python3
"""deploy/k8s/ holds what docs/deploy.md promises, consistently, and its hetps commands are valid.
No Kubernetes API server can run here and kubectl's client-side dry run needs one for
discovery, so this is the offline check: every document parses and names apiVersion, kind and
metadata.name; each Service selects the pods of a workload and its targetPorts exist in their
containers; the StatefulSet's serviceName is a headless Service and it claims a volume per pod;
the workers are an Indexed Job with one pod per index; every container asks for resources and
defines every $(VAR) its args use; the scheduler pods carry Prometheus's scrape annotations; and
every hetps command runs with HETPS_AUTH=curve and a key Secret mounted read-only at /keys and,
$(VAR)s filled in, passes its daemon's --check_flags.
Usage: k8s_test.py SOURCE_DIR BIN_DIR"""
import glob
import os
import re
import sys

import yaml

from deploy_check import check_flags, finish

source, bindir = sys.argv[1], sys.argv[2]
docs = []
for path in sorted(glob.glob(os.path.join(source, "deploy/k8s/*.yaml"))):
    with open(path) as f:
        docs += [(os.path.basename(path), d) for d in yaml.safe_load_all(f) if d]
failures = []


def fail(where, what):
    failures.append(f"{where}: {what}")


workloads = {}  # name -> (kind, spec, pod template)
services = {}
for path, d in docs:
    where = f"{path} {d.get('kind')}/{d.get('metadata', {}).get('name')}"
    for key in ("apiVersion", "kind", "metadata"):
        if key not in d:
            fail(where, f"no {key}")
    if "name" not in d.get("metadata", {}):
        fail(where, "no metadata.name")
    kind = d.get("kind")
    if kind in ("Deployment", "StatefulSet", "Job", "DaemonSet"):
        template = d["spec"]["template"]
        workloads[d["metadata"]["name"]] = (kind, d["spec"], template)
        selector = d["spec"].get("selector", {}).get("matchLabels")
        if kind != "Job" and (not selector or
                              any(template["metadata"]["labels"].get(k) != v
                                  for k, v in selector.items())):
            fail(where, "the selector does not match the pod template's labels")
    elif kind == "Service":
        services[d["metadata"]["name"]] = d

for name, s in services.items():
    selected = [w for w, (_, _, t) in workloads.items()
                if all(t["metadata"]["labels"].get(k) == v for k, v in s["spec"]["selector"].items())]
    if not selected:
        fail(f"Service/{name}", "selects no workload's pods")
        continue
    ports = {p.get("name") for w in selected for c in workloads[w][2]["spec"]["containers"]
             for p in c.get("ports", [])}
    for p in s["spec"]["ports"]:
        if p.get("targetPort") not in ports:
            fail(f"Service/{name}", f"targetPort {p.get('targetPort')} is no container port")

kinds = {name: kind for name, (kind, _, _) in workloads.items()}
expect = {
    "a scheduler Deployment": kinds.get("hetps-scheduler") == "Deployment",
    "a scheduler Service": "hetps-scheduler" in services,
    "servers as a StatefulSet": kinds.get("hetps-server") == "StatefulSet",
    "workers as a Job": kinds.get("hetps-worker") == "Job",
    "aggregators as a DaemonSet": kinds.get("hetps-aggregator") == "DaemonSet",
}
failures += [f"expected: {what}" for what, ok in expect.items() if not ok]
if kinds.get("hetps-server") == "StatefulSet":
    spec = workloads["hetps-server"][1]
    headless = services.get(spec.get("serviceName"), {}).get("spec", {}).get("clusterIP")
    if headless != "None":
        fail("StatefulSet/hetps-server", "serviceName is not a headless Service")
    if not spec.get("volumeClaimTemplates"):
        fail("StatefulSet/hetps-server", "no PersistentVolumeClaim per pod")
if kinds.get("hetps-worker") == "Job":
    spec = workloads["hetps-worker"][1]
    if spec.get("completionMode") != "Indexed" or spec.get("parallelism") != spec.get(
            "completions"):
        fail("Job/hetps-worker", "not an Indexed Job with one running pod per index")
if kinds.get("hetps-scheduler"):
    notes = workloads["hetps-scheduler"][2]["metadata"].get("annotations", {})
    if notes.get("prometheus.io/scrape") != "true" or notes.get("prometheus.io/path") != "/metrics":
        fail("Deployment/hetps-scheduler", "no Prometheus scrape annotations")

checked = 0
for name, (_, _, template) in workloads.items():
    for c in template["spec"]["containers"]:
        where = f"{name}/{c['name']}"
        if not c.get("resources", {}).get("requests"):
            fail(where, "no resource requests")
        env = {e["name"]: e.get("value", "0") for e in c.get("env", [])}
        args = c.get("command", []) + c.get("args", [])
        for a in args:
            for var in re.findall(r"\$\((\w+)\)", a):
                if var not in env:
                    fail(where, f"$({var}) is not in the container's env")
        if args and args[0].startswith("hetps-"):
            secrets = {v["name"] for v in template["spec"].get("volumes", []) if "secret" in v}
            if env.get("HETPS_AUTH") != "curve" or not any(
                    m.get("mountPath") == "/keys" and m.get("readOnly") and m["name"] in secrets
                    for m in c.get("volumeMounts", [])):
                fail(where, "does not run with --auth=curve and its keys' Secret mounted read-only")
            filled = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), "0"), a) for a in args]
            checked += 1
            if (error := check_flags(bindir, filled, {k: v for k, v in env.items()
                                                      if k.startswith("HETPS_")})) is not None:
                fail(where, error)
if kinds.get("hetps-aggregator") == "DaemonSet":
    # A node's workers find its aggregator by the host both register with: the node's name.
    for name in ("hetps-aggregator", "hetps-worker"):
        env = workloads[name][2]["spec"]["containers"][0].get("env", [])
        if not any(e["name"] == "HETPS_HOST" and e.get("valueFrom", {}).get("fieldRef", {}).get(
                "fieldPath") == "spec.nodeName" for e in env):
            fail(name, "does not register with its node's name (HETPS_HOST from spec.nodeName)")
finish(failures, checked, 5, f"{len(docs)} documents")
