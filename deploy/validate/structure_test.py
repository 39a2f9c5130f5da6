#!/usr/bin/env python3
"""Tests of structure.py: the real deploy/ files pass, and each of a set of
realistic mistakes, applied to a copy of them, is caught with its message.

    python3 -m unittest -v structure_test     (from deploy/validate)
"""

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import structure  # noqa: E402

# (name, file under deploy/, old text, new text, a substring the failure must contain)
MUTATIONS = [
    ("kafka with zookeeper roles", "docker-compose.yml",
     "KAFKA_PROCESS_ROLES: broker,controller", "KAFKA_PROCESS_ROLES: broker", "KRaft"),
    ("topic without 6 partitions", "docker-compose.yml",
     "--partitions 6", "--partitions 1", "6 partitions"),
    ("topic misnamed", "docker-compose.yml",
     "--topic parley.sessions.v1 --partitions", "--topic parley.sessions --partitions", "does not create parley.sessions.v1"),
    ("redis without persistence", "docker-compose.yml",
     '"--appendonly", "yes"', '"--appendonly", "no"', "persistence"),
    ("gateway registry writable", "docker-compose.yml",
     "registry:/var/lib/parley/registry:ro", "registry:/var/lib/parley/registry", "read-only"),
    ("gateway healthcheck on healthz", "docker-compose.yml",
     '"http://127.0.0.1:8080/readyz"', '"http://127.0.0.1:8080/healthz"', "/readyz"),
    ("redis healthcheck removed", "docker-compose.yml",
     'test: ["CMD", "redis-cli", "ping"]', 'disable: true', "waits for redis to be healthy"),
    ("undeclared volume", "docker-compose.yml",
     "learner-data:/var/lib/parley/learner\n    # The learner", "learner-dat:/var/lib/parley/learner\n    # The learner", "not declared"),
    ("spool not on a volume", "docker-compose.yml",
     "      - gateway-data:/var/lib/parley/gateway\n", "", "which holds the spool"),
    ("wrong collector endpoint", "docker-compose.yml",
     "OTEL_EXPORTER_OTLP_ENDPOINT: http://otel-collector:4318", "OTEL_EXPORTER_OTLP_ENDPOINT: http://otel-collector:4317", "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ("unpinned image", "docker-compose.yml",
     "image: redis:7.4-alpine", "image: redis", "not pinned"),
    ("pipeline uses undefined exporter", "otel-collector.yaml",
     "exporters: [prometheus, debug]", "exporters: [prometheus, debug, otlp]", "'otlp' is not defined"),
    ("collector exports on another port", "otel-collector.yaml",
     "endpoint: 0.0.0.0:8889", "endpoint: 0.0.0.0:9999", "otel-collector:9999"),
    ("prometheus misses the gateway", "prometheus.yml",
     "names: [gateway]", "names: [gw]", "scrapes the gateway"),
    ("cgo in the default build", "Dockerfile",
     "CGO_ENABLED=0 go build", "CGO_ENABLED=1 go build", "CGO_ENABLED=0"),
    ("root runtime", "Dockerfile",
     "ENV GOMLX_NO_AUTO_INSTALL=1 \\\n    PARLEY_LOG_FORMAT=json\nUSER parley:parley",
     "ENV GOMLX_NO_AUTO_INSTALL=1 \\\n    PARLEY_LOG_FORMAT=json\nUSER root", "non-root"),
    ("xla build without the tag", "Dockerfile",
     "CGO_ENABLED=1 go build -trimpath -tags xla", "CGO_ENABLED=1 go build -trimpath", "-tags xla"),
    ("readiness on healthz", "k8s/gateway.yaml",
     "          readinessProbe:\n            httpGet:\n              path: /readyz",
     "          readinessProbe:\n            httpGet:\n              path: /healthz", "readinessProbe must GET /readyz"),
    ("PDB covering both gateway kinds", "k8s/gateway.yaml",
     "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/component: gateway\n      parley.dev/backend: go\n",
     "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/component: gateway\n", "PodDisruptionBudgets"),
    ("HPA on a missing deployment", "k8s/gateway.yaml",
     "    kind: Deployment\n    name: parley-gateway\n", "    kind: Deployment\n    name: parley-gw\n", "scaleTargetRef"),
    ("GPU gateway without a GPU", "k8s/gateway-gpu.yaml",
     "              nvidia.com/gpu: \"1\"\n            limits:\n              memory: 16Gi\n              nvidia.com/gpu: \"1\"\n",
     "            limits:\n              memory: 16Gi\n", "nvidia.com/gpu"),
    ("GPU gateway without the plugin path", "k8s/gateway-gpu.yaml",
     "            - name: PJRT_PLUGIN_LIBRARY_PATH\n              value: /opt/pjrt\n", "", "PJRT_PLUGIN_LIBRARY_PATH"),
    ("GPU gateway without a node selector", "k8s/gateway-gpu.yaml",
     "      nodeSelector:\n        parley.dev/node-pool: gpu\n", "", "nodeSelector"),
    ("learner data on emptyDir", "k8s/learner.yaml",
     "            - name: data\n              mountPath: /var/lib/parley/learner\n",
     "            - name: tmp\n              mountPath: /var/lib/parley/learner\n", "PersistentVolumeClaim"),
    ("registry not RWX", "k8s/registry-pvc.yaml",
     'accessModes: ["ReadWriteMany"]', 'accessModes: ["ReadWriteOnce"]', "ReadWriteMany"),
    ("service selects nothing", "k8s/gateway.yaml",
     "  selector:\n    app.kubernetes.io/component: gateway\n  ports:",
     "  selector:\n    app.kubernetes.io/component: gatewy\n  ports:", "matches no pods"),
    ("missing configmap", "k8s/learner.yaml",
     "                name: parley-config", "                name: parley-conf", "does not exist"),
    ("required secret", "k8s/gateway.yaml",
     "                name: parley-secrets\n                optional: true\n", "                name: parley-secrets\n", "not optional"),
]


def run_structure(deploy, rendered=None):
    argv = ["structure.py", "--deploy", deploy]
    if rendered:
        argv += ["--k8s-rendered", rendered]
    out = io.StringIO()
    old = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(out):
            rc = structure.main()
    finally:
        sys.argv = old
    return rc, out.getvalue()


def render(deploy):
    """Runs kubectl kustomize when kubectl exists, else returns None."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    out = os.path.join(deploy, "rendered.yaml")
    with open(out, "w", encoding="utf-8") as f:
        subprocess.run([kubectl, "kustomize", os.path.join(deploy, "k8s")], stdout=f, check=True)
    return out


class StructureTest(unittest.TestCase):
    def test_real_files_pass(self):
        with tempfile.TemporaryDirectory() as tmp:
            deploy = os.path.join(tmp, "deploy")
            shutil.copytree(DEPLOY, deploy, ignore=shutil.ignore_patterns("node_modules"))
            rc, out = run_structure(deploy, render(deploy))
            self.assertEqual(rc, 0, f"structure.py on deploy/ failed:\n{out}")

    def test_mistakes_are_caught(self):
        for name, rel, old, new, want in MUTATIONS:
            with self.subTest(name):
                with tempfile.TemporaryDirectory() as tmp:
                    deploy = os.path.join(tmp, "deploy")
                    shutil.copytree(DEPLOY, deploy, ignore=shutil.ignore_patterns("node_modules"))
                    path = os.path.join(deploy, rel)
                    with open(path, encoding="utf-8") as f:
                        text = f.read()
                    self.assertEqual(text.count(old), 1, f"mutation {name!r}: want the old text once in {rel}, got {text.count(old)}")
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(text.replace(old, new))
                    rc, out = run_structure(deploy, render(deploy))
                    self.assertEqual(rc, 1, f"mutation {name!r}: got exit {rc}, want 1; output:\n{out}")
                    self.assertIn(want, out, f"mutation {name!r}: the failure does not say {want!r}; output:\n{out}")


if __name__ == "__main__":
    unittest.main()
