#!/usr/bin/env python3
"""Checks what ties floodgate's rendered manifests to its configuration file.

    kube-consistency.py RENDERED.yaml...

For every rendered overlay (the output of `kubectl kustomize`), reading the floodgate.toml its
ConfigMap carries:
- terminationGracePeriodSeconds >= preStop sleep + shutdown_timeout_ms + delivery_timeout_ms,
  so the kubelet's SIGKILL never cuts floodgate's drain short;
- the liveness probe tolerates a whole drain (the admin listener closes at SIGTERM);
- the startup probe allows at least 30 s;
- every checkov skip annotation names a policy and gives a reason;
- with [cluster]: the Deployment starts at the HPA's minReplicas, expected_replicas is the HPA's
  maxReplicas, and a rollout surges no pod (so no more than expected_replicas ever run).
Exits 1 naming each mismatch.
"""

import re
import sys
import tomllib

import yaml


def by_kind(docs, kind):
    return [d for d in docs if d and d.get("kind") == kind]


def floodgate_parts(docs):
    deployment = next(
        d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "floodgate"
    )
    config_map = next(
        d
        for d in by_kind(docs, "ConfigMap")
        if d["metadata"]["name"].startswith("floodgate-config")
    )
    config = tomllib.loads(config_map["data"]["floodgate.toml"])
    hpa = next(iter(by_kind(docs, "HorizontalPodAutoscaler")), None)
    return deployment, config, hpa


def drain_problems(deployment, config):
    problems = []
    pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "floodgate")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
    sleep_s = pre_stop.get("seconds", 0)
    shutdown_s = config.get("server", {}).get("shutdown_timeout_ms", 30000) / 1000
    delivery_s = config.get("kafka", {}).get("delivery_timeout_ms", 30000) / 1000
    need = sleep_s + shutdown_s + delivery_s
    if grace < need:
        problems.append(
            f"terminationGracePeriodSeconds {grace} < preStop {sleep_s} + shutdown "
            f"{shutdown_s} + delivery {delivery_s}"
        )
    live = container["livenessProbe"]
    tolerated = live.get("periodSeconds", 10) * live.get("failureThreshold", 3)
    if tolerated <= shutdown_s:
        problems.append(
            f"the liveness probe fails after {tolerated} s, within a drain of {shutdown_s} s"
        )
    start = container["startupProbe"]
    if start.get("periodSeconds", 10) * start.get("failureThreshold", 3) < 30:
        problems.append("the startup probe allows less than 30 s")
    return problems


def replica_problems(deployment, config, hpa):
    if "cluster" not in config:
        if hpa is not None:
            return ["an HPA without [cluster]: every replica would admit the whole budget"]
        return []
    problems = []
    expected = config["cluster"].get("expected_replicas", 3)
    replicas = deployment["spec"].get("replicas", 1)
    if hpa is None:
        if expected != replicas:
            problems.append(f"expected_replicas {expected} != replicas {replicas}")
    else:
        low, high = hpa["spec"].get("minReplicas", 1), hpa["spec"]["maxReplicas"]
        if replicas != low:
            problems.append(f"replicas {replicas} != the HPA's minReplicas {low}")
        if expected != high:
            problems.append(f"expected_replicas {expected} != the HPA's maxReplicas {high}")
    surge = (
        deployment["spec"].get("strategy", {}).get("rollingUpdate", {}).get("maxSurge", "25%")
    )
    if deployment["spec"].get("strategy", {}).get("type") != "Recreate" and surge not in (0, "0%"):
        problems.append(f"a rollout may surge {surge} pods beyond expected_replicas")
    return problems


def skip_problems(docs):
    problems = []
    for d in docs:
        if not d:
            continue
        for key, value in (d["metadata"].get("annotations") or {}).items():
            if key.startswith("checkov.io/skip"):
                if not re.fullmatch(r"CKV2?_K8S_\d+=\S.{30,}", value.strip(), re.S):
                    problems.append(f"{d['kind']}/{d['metadata']['name']}: {key} has no reason")
    return problems


def main():
    failed = False
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            docs = list(yaml.safe_load_all(f))
        deployment, config, hpa = floodgate_parts(docs)
        problems = (
            drain_problems(deployment, config)
            + replica_problems(deployment, config, hpa)
            + skip_problems(docs)
        )
        for p in problems:
            print(f"{path}: {p}", file=sys.stderr)
        failed |= bool(problems)
        if not problems:
            print(f"{path}: drain timing, replica counts and checkov skips consistent")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
