#!/usr/bin/env python3
"""Checks rendered manifests (`kubectl kustomize OVERLAY > out.yaml`).

1. Every object against the Kubernetes OpenAPI schemas of a pinned
   version, strictly (an unknown field is an error), with the
   `kubernetes-validate` package.
2. What the schemas cannot see: names that must point at each other.
   Selectors of Services, PodDisruptionBudgets and NetworkPolicies select
   some pod template; Service target ports, probe ports, NetworkPolicy ports
   and the Prometheus port annotation name real container ports; every
   Secret, ConfigMap (and key), PersistentVolumeClaim and volume a pod uses
   exists; a StatefulSet's serviceName is a Service; `$(VAR)` in an env
   value refers to a variable defined before it; every namespaced object is
   in the Namespace the manifests create.

Usage: validate.py [--version 1.30.0] FILE...   (exit 1 on any error)
"""

import argparse
import re
import sys

import kubernetes_validate
import yaml

VERSION = "1.30.0"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")
CLUSTER_SCOPED = ("Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass")


def schema_errors(objs, version):
    errors = []
    for o in objs:
        try:
            kubernetes_validate.validate(o, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            errors.append(f"{kn(o)}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"{kn(o)}: no schema: {e}")
    return errors


def kn(o):
    return f"{o.get('kind')}/{o.get('metadata', {}).get('name')}"


def pod_templates(objs):
    """(workload, pod spec, pod labels) for every workload."""
    for o in objs:
        if o["kind"] in WORKLOADS:
            t = o["spec"]["template"]
            yield o, t["spec"], t.get("metadata", {}).get("labels", {})


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def container_ports(spec):
    ports = {}
    for c in spec.get("containers", []):
        for p in c.get("ports", []):
            ports[p["containerPort"]] = p
            if "name" in p:
                ports[p["name"]] = p
    return ports


class Refs:
    def __init__(self, objs):
        self.by_kind = {}
        for o in objs:
            self.by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
        self.errors = []

    def get(self, kind, name):
        return self.by_kind.get(kind, {}).get(name)

    def need(self, where, kind, name, key=None):
        o = self.get(kind, name)
        if o is None:
            self.errors.append(f"{where}: {kind} {name!r} does not exist")
            return
        if key is not None:
            keys = set(o.get("data", {}) or {}) | set(o.get("stringData", {}) or {})
            if key not in keys:
                self.errors.append(f"{where}: {kind} {name!r} has no key {key!r}")


def check_pod(refs, w, spec):
    where = kn(w)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    claims = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
    for v in volumes.values():
        if "secret" in v:
            refs.need(f"{where} volume {v['name']}", "Secret", v["secret"]["secretName"])
        if "configMap" in v:
            refs.need(f"{where} volume {v['name']}", "ConfigMap", v["configMap"]["name"])
        if "persistentVolumeClaim" in v:
            refs.need(f"{where} volume {v['name']}", "PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"])
    ports = container_ports(spec)
    for c in spec.get("initContainers", []) + spec.get("containers", []):
        cw = f"{where} container {c['name']}"
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes and m["name"] not in claims:
                refs.errors.append(f"{cw}: mounts volume {m['name']!r}, which is not defined")
        defined = set()
        for e in c.get("env", []):
            for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", e.get("value", "")):
                if var not in defined:
                    refs.errors.append(f"{cw}: env {e['name']} uses $({var}), not defined before it")
            defined.add(e["name"])
            src = e.get("valueFrom", {})
            if "secretKeyRef" in src:
                refs.need(f"{cw} env {e['name']}", "Secret", src["secretKeyRef"]["name"], src["secretKeyRef"]["key"])
            if "configMapKeyRef" in src:
                r = src["configMapKeyRef"]
                refs.need(f"{cw} env {e['name']}", "ConfigMap", r["name"], r["key"])
            label = re.fullmatch(r"metadata\.labels\['([^']+)'\]", src.get("fieldRef", {}).get("fieldPath", ""))
            if label and label.group(1) not in w["spec"]["template"]["metadata"].get("labels", {}):
                refs.errors.append(f"{cw}: env {e['name']} reads pod label {label.group(1)!r}, which the pod lacks")
        for f in c.get("envFrom", []):
            if "secretRef" in f:
                refs.need(f"{cw} envFrom", "Secret", f["secretRef"]["name"])
            if "configMapRef" in f:
                refs.need(f"{cw} envFrom", "ConfigMap", f["configMapRef"]["name"])
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            p = c.get(probe)
            if not p:
                continue
            for kind in ("httpGet", "tcpSocket", "grpc"):
                if kind in p and p[kind]["port"] not in container_ports({"containers": [c]}):
                    refs.errors.append(f"{cw}: {probe} port {p[kind]['port']!r} is not a port of the container")
    annotations = w["spec"]["template"].get("metadata", {}).get("annotations", {})
    if annotations.get("prometheus.io/scrape") == "true":
        port = annotations.get("prometheus.io/port")
        if port is None or int(port) not in ports:
            refs.errors.append(f"{where}: prometheus.io/port {port!r} is not a container port")
    if w["kind"] == "StatefulSet":
        svc = refs.get("Service", w["spec"].get("serviceName"))
        if svc is None:
            refs.errors.append(f"{where}: serviceName {w['spec'].get('serviceName')!r} is not a Service")
    sel = w["spec"]["selector"].get("matchLabels", {})
    if not selects(sel, w["spec"]["template"]["metadata"].get("labels", {})):
        refs.errors.append(f"{where}: selector {sel} does not match its own pod template")


def check_selectors(refs, objs):
    templates = list(pod_templates(objs))

    def matched(selector):
        return [(w, spec) for w, spec, labels in templates if selects(selector, labels)]

    for o in objs:
        kind, spec = o["kind"], o.get("spec", {})
        if kind == "Service" and spec.get("selector"):
            pods = matched(spec["selector"])
            if not pods:
                refs.errors.append(f"{kn(o)}: selector {spec['selector']} matches no pod template")
            for port in spec.get("ports", []):
                target = port.get("targetPort", port["port"])
                for w, pod in pods:
                    if target not in container_ports(pod):
                        refs.errors.append(f"{kn(o)}: targetPort {target!r} is not a port of {kn(w)}")
        if kind == "PodDisruptionBudget":
            if not matched(spec["selector"].get("matchLabels", {})):
                refs.errors.append(f"{kn(o)}: selector matches no pod template")
        if kind == "NetworkPolicy":
            pods = matched(spec["podSelector"].get("matchLabels", {}))
            if not pods:
                refs.errors.append(f"{kn(o)}: podSelector matches no pod template")
            for rule in spec.get("ingress", []):
                for port in rule.get("ports", []):
                    for w, pod in pods:
                        if port["port"] not in container_ports(pod):
                            refs.errors.append(f"{kn(o)}: port {port['port']!r} is not a port of {kn(w)}")


def check_namespaces(refs, objs):
    namespaces = set(refs.by_kind.get("Namespace", {}))
    for o in objs:
        if o["kind"] in CLUSTER_SCOPED:
            continue
        ns = o["metadata"].get("namespace")
        if ns not in namespaces:
            refs.errors.append(f"{kn(o)}: namespace {ns!r} is not one the manifests create")


def check(objs, version):
    errors = schema_errors(objs, version)
    refs = Refs(objs)
    for w, spec, _ in pod_templates(objs):
        check_pod(refs, w, spec)
    check_selectors(refs, objs)
    check_namespaces(refs, objs)
    return errors + refs.errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=VERSION)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    failed = False
    for path in args.files:
        with open(path) as f:
            objs = [o for o in yaml.safe_load_all(f) if o]
        errors = check(objs, args.version)
        for e in errors:
            print(f"{path}: {e}")
        print(f"{path}: {len(objs)} objects, Kubernetes {args.version}: {'FAILED' if errors else 'ok'}")
        failed |= bool(errors)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
