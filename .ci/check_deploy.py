"""Checks of deploy/ that a schema alone cannot make, and the ScaledObject against KEDA's CRD.

    python .ci/check_deploy.py deploy

1. deploy/kubernetes/keda.yaml validates against the vendored openAPIV3Schema of KEDA's
   ScaledObject CRD (deploy/keda/), strictly: an unknown field anywhere is an error, as
   kubernetes-validate --strict does for the core kinds (the API server would silently prune
   it, so a misspelt `minReplicas` would be lost without a word). A copy with a misspelt field
   must fail, or the check itself is broken.
2. The rules the fleet depends on: the dispatchers' terminationGracePeriodSeconds is above the
   lease TTL plus the drain grace (from the ConfigMap), the ScaledObject never goes below 2
   replicas nor scales in faster than one pod per lease window, every container probes
   /readyz and /healthz, the ScaledObject targets the dispatcher Deployment.
Prints what it checked; exits non-zero naming every problem.
"""

import copy
import json
import re
import sys
from pathlib import Path

import jsonschema
import yaml


def strict(schema):
    """The schema with additionalProperties: false on every object that lists properties."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def seconds(text):
    m = re.fullmatch(r"(\d+)s", text)
    if not m:
        raise ValueError(f"expected a duration in seconds like 60s, got {text!r}")
    return int(m.group(1))


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "deploy")
    problems = []
    docs = []
    for path in sorted((root / "kubernetes").glob("*.yaml")):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    kinds = {(d["kind"], d["metadata"]["name"]): d for _, d in docs}

    schema = json.loads((root / "keda" / "scaledobject-v1alpha1.schema.json").read_text())
    validator = jsonschema.Draft7Validator(strict(schema))
    scaled = kinds[("ScaledObject", "sluice-dispatcher")]
    errors = sorted(validator.iter_errors(scaled), key=lambda e: list(e.path))
    for e in errors:
        problems.append(f"ScaledObject {'/'.join(map(str, e.path))}: {e.message}")
    broken = copy.deepcopy(scaled)
    broken["spec"]["minReplicas"] = broken["spec"].pop("minReplicaCount")
    if validator.is_valid(broken):
        problems.append("the strict ScaledObject schema accepted a misspelt field")
    print(f"ScaledObject against KEDA's CRD schema: {len(errors)} errors")

    config = kinds[("ConfigMap", "sluice-config")]["data"]
    lease = seconds(config["SLUICE_LEASE_TTL"])
    grace = seconds(config["SLUICE_DRAIN_GRACE"])
    dispatcher = kinds[("Deployment", "sluice-dispatcher")]["spec"]["template"]["spec"]
    termination = dispatcher["terminationGracePeriodSeconds"]
    if termination <= lease + grace:
        problems.append(
            f"dispatcher terminationGracePeriodSeconds {termination} must exceed lease TTL "
            f"{lease} + drain grace {grace}"
        )
    spec = scaled["spec"]
    if spec["scaleTargetRef"]["name"] != "sluice-dispatcher":
        problems.append("the ScaledObject must scale the dispatcher Deployment")
    if spec.get("minReplicaCount", 0) < 2:
        problems.append("minReplicaCount must be at least 2 (never scale dispatchers to zero)")
    down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    for policy in down["policies"]:
        if policy["type"] != "Pods" or policy["value"] != 1 or policy["periodSeconds"] < lease:
            problems.append(f"scale-in faster than one pod per lease window ({lease} s): {policy}")
    for (kind, name), d in kinds.items():
        if kind != "Deployment":
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            ready = c.get("readinessProbe", {}).get("httpGet", {}).get("path")
            alive = c.get("livenessProbe", {}).get("httpGet", {}).get("path")
            if (ready, alive) != ("/readyz", "/healthz"):
                problems.append(f"{name}: probes must be /readyz and /healthz, got {ready}, {alive}")
    print(
        f"fleet rules: grace {termination} s > lease {lease} s + drain {grace} s; "
        f"min replicas {spec.get('minReplicaCount')}; scale-in "
        f"{[p['periodSeconds'] for p in down['policies']]} s per pod"
    )
    if problems:
        print("deploy/ problems:\n  " + "\n  ".join(problems))
        sys.exit(1)


if __name__ == "__main__":
    main()
