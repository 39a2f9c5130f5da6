#!/usr/bin/env python3
"""Structural checks of Parley's deploy/ files that no generic schema knows.

The schema validators say a Deployment is a well-formed Deployment; this says
it is the one Parley needs: the gateway's readiness probe is /readyz, the HPA
targets a Deployment that exists, no pod is covered by two
PodDisruptionBudgets, the GPU gateway asks for a GPU and names the PJRT
plugin, the Kafka in docker-compose runs in KRaft mode and the sessions topic
gets 6 partitions, the collector's pipelines use only components it defines,
Prometheus scrapes what the collector exports, and so on.

    python3 structure.py --deploy DIR [--k8s-rendered FILE] [--binary PARLEY]

--k8s-rendered is the output of `kubectl kustomize DIR/k8s`; without it the
files named in DIR/k8s/kustomization.yaml are read as they are. With
--binary PATH (a built parley) it also checks every PARLEY_* variable and
--flag given to `parley gateway` and `parley learner` against their --help.
Prints one line per check that fails and a summary line; exits 1 if any failed.
"""

import argparse
import os
import re
import subprocess
import sys

import yaml

SESSIONS_TOPIC = "parley.sessions.v1"
SESSIONS_PARTITIONS = 6


class Checker:
    """Collects failed checks with the file they are about."""

    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, ok, where, message):
        if ok:
            self.passed += 1
        else:
            self.failures.append(f"{where}: {message}")
        return ok


def load_all(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_one(path):
    docs = load_all(path)
    if len(docs) != 1:
        raise ValueError(f"{path}: want one YAML document, got {len(docs)}")
    return docs[0]


def as_text(command):
    """Joins a compose command (string or list) into one string."""
    if command is None:
        return ""
    if isinstance(command, list):
        return " ".join(str(c) for c in command)
    return str(command)


def env_of(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def mounts_of(service):
    """Returns (source, target, read_only) of each short-syntax volume."""
    out = []
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            out.append((v.get("source"), v.get("target"), bool(v.get("read_only"))))
            continue
        parts = v.split(":")
        source, target = parts[0], parts[1] if len(parts) > 1 else parts[0]
        out.append((source, target, len(parts) > 2 and "ro" in parts[2].split(",")))
    return out


# ---------------------------------------------------------------------------
# docker-compose.yml


def check_compose(c, deploy):
    where = "docker-compose.yml"
    doc = load_one(os.path.join(deploy, "docker-compose.yml"))
    services = doc.get("services") or {}
    volumes = doc.get("volumes") or {}
    for name in ["kafka", "kafka-init", "redis", "learner", "gateway", "otel-collector", "prometheus"]:
        c.check(name in services, where, f"service {name!r} is missing")
    c.check(not any("zookeeper" in n for n in services), where, "a ZooKeeper service: Kafka must run in KRaft mode")

    for name, svc in services.items():
        image = svc.get("image", "")
        c.check(bool(image), where, f"{name}: no image")
        if image and not image.startswith("${"):
            c.check(":" in image and not image.endswith(":latest"), where, f"{name}: image {image!r} is not pinned to a tag")
        one_shot = str(svc.get("restart", "")) == "no"
        has_health = bool(svc.get("healthcheck")) and not svc["healthcheck"].get("disable")
        if not one_shot and name not in ("otel-collector", "learner"):
            c.check(has_health, where, f"{name}: long-running service without a healthcheck")
        deps = svc.get("depends_on") or {}
        if isinstance(deps, list):
            deps = {d: {"condition": "service_started"} for d in deps}
        for dep, spec in deps.items():
            if not c.check(dep in services, where, f"{name}: depends on unknown service {dep!r}"):
                continue
            cond = (spec or {}).get("condition", "service_started")
            if cond == "service_healthy":
                dep_health = services[dep].get("healthcheck") or {}
                c.check(bool(dep_health) and not dep_health.get("disable"), where, f"{name}: waits for {dep} to be healthy but {dep} has no healthcheck")
            if cond == "service_completed_successfully":
                c.check(str(services[dep].get("restart", "")) == "no", where, f"{name}: waits for {dep} to complete but {dep} restarts")
        for source, _target, _ro in mounts_of(svc):
            if source and not source.startswith((".", "/", "$")):
                c.check(source in volumes, where, f"{name}: volume {source!r} is not declared under volumes:")
            if source and source.startswith("./"):
                c.check(os.path.exists(os.path.join(deploy, source)), where, f"{name}: mounts {source} which does not exist")

    kafka = services.get("kafka", {})
    kenv = env_of(kafka)
    roles = set(kenv.get("KAFKA_PROCESS_ROLES", "").split(","))
    c.check({"broker", "controller"} <= roles, where, "kafka: KAFKA_PROCESS_ROLES must be broker,controller (KRaft, single node)")
    c.check(bool(kenv.get("KAFKA_CONTROLLER_QUORUM_VOTERS")), where, "kafka: KAFKA_CONTROLLER_QUORUM_VOTERS is not set")
    c.check(not any(k.startswith("KAFKA_ZOOKEEPER") for k in kenv), where, "kafka: ZooKeeper settings in a KRaft broker")
    c.check(kenv.get("KAFKA_AUTO_CREATE_TOPICS_ENABLE") == "false", where, "kafka: topics must be created explicitly (KAFKA_AUTO_CREATE_TOPICS_ENABLE=false)")
    c.check("kafka:9092" in kenv.get("KAFKA_ADVERTISED_LISTENERS", ""), where, "kafka: must advertise kafka:9092 to the other containers")

    # The command that creates the topic (kafka-init may describe it afterwards).
    init = next((part for part in re.split(r"&&|;", as_text(services.get("kafka-init", {}).get("command"))) if "--create" in part), "")
    c.check(f"--topic {SESSIONS_TOPIC}" in init, where, f"kafka-init: does not create {SESSIONS_TOPIC}")
    c.check(f"--partitions {SESSIONS_PARTITIONS}" in init, where, f"kafka-init: {SESSIONS_TOPIC} needs {SESSIONS_PARTITIONS} partitions")
    c.check("--if-not-exists" in init, where, "kafka-init: must be rerunnable (--if-not-exists)")

    redis_cmd = as_text(services.get("redis", {}).get("command"))
    c.check("--appendonly yes" in redis_cmd, where, "redis: persistence (--appendonly yes) is off")
    c.check(any(t == "/data" for _s, t, _r in mounts_of(services.get("redis", {}))), where, "redis: /data is not on a volume")

    gw, ln = services.get("gateway", {}), services.get("learner", {})
    c.check(as_text(gw.get("command")).split()[:1] == ["gateway"], where, "gateway: command must be `gateway`")
    c.check(as_text(ln.get("command")).split()[:1] == ["learner"], where, "learner: command must be `learner`")
    genv, lenv = env_of(gw), env_of(ln)
    for name, env, keys in [
        ("gateway", genv, ["PARLEY_ADDR", "PARLEY_REDIS_ADDR", "PARLEY_KAFKA_BROKERS", "PARLEY_REGISTRY", "PARLEY_DATA_DIR", "PARLEY_DEPLOYMENT"]),
        ("learner", lenv, ["PARLEY_REDIS_ADDR", "PARLEY_KAFKA_BROKERS", "PARLEY_REGISTRY", "PARLEY_DATA_DIR"]),
    ]:
        for k in keys:
            c.check(bool(env.get(k)), where, f"{name}: {k} is not set")
        c.check(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://otel-collector:4318", where, f"{name}: OTEL_EXPORTER_OTLP_ENDPOINT must be http://otel-collector:4318")
        c.check(env.get("PARLEY_KAFKA_BROKERS", "").split(",")[0] == "kafka:9092", where, f"{name}: PARLEY_KAFKA_BROKERS must name kafka:9092")
        c.check(env.get("PARLEY_REDIS_ADDR") == "redis:6379", where, f"{name}: PARLEY_REDIS_ADDR must be redis:6379")
    c.check(genv.get("PARLEY_ADDR", "").startswith("0.0.0.0:"), where, "gateway: PARLEY_ADDR must listen on all interfaces in a container")
    hc = as_text((gw.get("healthcheck") or {}).get("test"))
    c.check("/readyz" in hc, where, "gateway: the healthcheck must probe /readyz (a model is loaded)")

    registry = genv.get("PARLEY_REGISTRY")
    gw_reg = [(s, ro) for s, t, ro in mounts_of(gw) if t == registry]
    ln_reg = [(s, ro) for s, t, ro in mounts_of(ln) if t == registry]
    c.check(len(gw_reg) == 1 and gw_reg[0][1], where, f"gateway: the registry ({registry}) must be mounted read-only")
    c.check(len(ln_reg) == 1 and not ln_reg[0][1], where, f"learner: the registry ({registry}) must be mounted read-write")
    if gw_reg and ln_reg:
        c.check(gw_reg[0][0] == ln_reg[0][0], where, "the gateway and the learner must share one registry volume")
    gw_data = genv.get("PARLEY_DATA_DIR")
    c.check(any(t == gw_data and s in volumes for s, t, _r in mounts_of(gw)), where, f"gateway: PARLEY_DATA_DIR ({gw_data}, which holds the spool) is not on a named volume: spooled events would not survive `down`/`up`")
    data_dir = lenv.get("PARLEY_DATA_DIR")
    c.check(any(t == data_dir and s in volumes for s, t, _r in mounts_of(ln)), where, f"learner: PARLEY_DATA_DIR ({data_dir}) is not on a named volume")

    otel_mounts = [s for s, t, _r in mounts_of(services.get("otel-collector", {}))]
    c.check("./otel-collector.yaml" in otel_mounts, where, "otel-collector: does not mount ./otel-collector.yaml")
    prom_mounts = [s for s, t, _r in mounts_of(services.get("prometheus", {}))]
    c.check("./prometheus.yml" in prom_mounts, where, "prometheus: does not mount ./prometheus.yml")


# ---------------------------------------------------------------------------
# otel-collector.yaml and prometheus.yml


def check_otel(c, deploy):
    where = "otel-collector.yaml"
    doc = load_one(os.path.join(deploy, "otel-collector.yaml"))
    defined = {kind: set((doc.get(kind) or {}).keys()) for kind in ["receivers", "processors", "exporters", "extensions", "connectors"]}
    service = doc.get("service") or {}
    for ext in service.get("extensions") or []:
        c.check(ext in defined["extensions"], where, f"service uses extension {ext!r} that is not defined")
    pipelines = service.get("pipelines") or {}
    c.check("metrics" in pipelines, where, "no metrics pipeline")
    used = {"receivers": set(), "processors": set(), "exporters": set()}
    for name, p in pipelines.items():
        c.check(re.fullmatch(r"(traces|metrics|logs)(/\w+)?", name) is not None, where, f"pipeline {name!r}: unknown signal")
        c.check(bool(p.get("receivers")) and bool(p.get("exporters")), where, f"pipeline {name!r}: needs receivers and exporters")
        for kind in used:
            for comp in p.get(kind) or []:
                used[kind].add(comp)
                ok = comp in defined[kind] or (kind != "processors" and comp in defined["connectors"])
                c.check(ok, where, f"pipeline {name!r}: {kind[:-1]} {comp!r} is not defined")
    for kind in used:
        for comp in defined[kind] - used[kind]:
            c.check(False, where, f"{kind[:-1]} {comp!r} is defined but no pipeline uses it")
    otlp = (doc.get("receivers") or {}).get("otlp") or {}
    http = ((otlp.get("protocols") or {}).get("http")) or {}
    c.check(str(http.get("endpoint", "")).endswith(":4318"), where, "the OTLP receiver must take OTLP/HTTP on :4318")
    c.check("prometheus" in used["exporters"] and "prometheus" in (pipelines.get("metrics") or {}).get("exporters", []), where, "metrics must go to the prometheus exporter")
    return str(((doc.get("exporters") or {}).get("prometheus") or {}).get("endpoint", ""))


def check_prometheus(c, deploy, collector_endpoint):
    where = "prometheus.yml"
    doc = load_one(os.path.join(deploy, "prometheus.yml"))
    jobs = {j.get("job_name"): j for j in doc.get("scrape_configs") or []}
    targets = set()
    for j in jobs.values():
        for sc in j.get("static_configs") or []:
            targets.update(sc.get("targets") or [])
        for sd in j.get("dns_sd_configs") or []:
            targets.update(f"{n}:{sd.get('port')}" for n in sd.get("names") or [])
    gateway_jobs = [j for j in jobs.values() if any(t.startswith("gateway:") for t in _targets(j))]
    c.check(len(gateway_jobs) == 1, where, "no job scrapes the gateway on gateway:8080")
    for j in gateway_jobs:
        c.check(j.get("metrics_path", "/metrics") == "/metrics", where, "the gateway job must scrape /metrics")
        c.check(all(t == "gateway:8080" for t in _targets(j)), where, "the gateway listens on 8080")
    port = collector_endpoint.rsplit(":", 1)[-1]
    c.check(f"otel-collector:{port}" in targets, where, f"no job scrapes the collector's prometheus exporter (otel-collector:{port})")


def _targets(job):
    out = []
    for sc in job.get("static_configs") or []:
        out.extend(sc.get("targets") or [])
    for sd in job.get("dns_sd_configs") or []:
        out.extend(f"{n}:{sd.get('port')}" for n in sd.get("names") or [])
    return out


# ---------------------------------------------------------------------------
# Dockerfile


def check_dockerfile(c, deploy):
    where = "Dockerfile"
    with open(os.path.join(deploy, "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    # Join continuation lines, drop comments.
    logical = re.sub(r"\\\n", " ", text)
    lines = [l.strip() for l in logical.splitlines() if l.strip() and not l.strip().startswith("#")]
    stages, current = {}, None
    order = []
    for line in lines:
        m = re.match(r"(?i)FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line)
        if m:
            current = m.group(2) or f"stage{len(order)}"
            stages[current] = {"from": m.group(1), "lines": []}
            order.append(current)
            continue
        if current:
            stages[current]["lines"].append(line)
    for name in ["build", "build-xla", "runtime", "runtime-xla"]:
        c.check(name in stages, where, f"stage {name!r} is missing")
    c.check(order and order[-1] == "runtime", where, "the last stage must be `runtime` (what a plain docker build gives)")
    source_from = [s["from"] for s in stages.values() if s["from"].startswith("golang:")]
    c.check(bool(source_from), where, "no golang builder stage")

    def body(stage):
        return "\n".join(stages.get(stage, {}).get("lines", []))

    b, bx = body("build"), body("build-xla")
    c.check("CGO_ENABLED=0" in b and "-trimpath" in b and "./cmd/parley" in b and "-o /out/parley" in b, where,
            "build: must run CGO_ENABLED=0 go build -trimpath -o /out/parley ./cmd/parley")
    c.check("CGO_ENABLED=1" in bx and "-tags xla" in bx and "./cmd/parley" in bx, where,
            "build-xla: must run CGO_ENABLED=1 go build -tags xla ./cmd/parley")
    for rt, src in [("runtime", "build"), ("runtime-xla", "build-xla")]:
        r = body(rt)
        c.check(f"COPY --from={src} /out/parley" in r, where, f"{rt}: must copy the binary of {src}")
        users = re.findall(r"(?im)^USER\s+(\S+)", r)
        c.check(bool(users) and not users[-1].split(":")[0] in ("root", "0"), where, f"{rt}: must run as a non-root USER")
        c.check(re.search(r"(?m)^EXPOSE\s+8080\b", r) is not None, where, f"{rt}: must EXPOSE 8080")
        c.check(re.search(r'(?m)^ENTRYPOINT\s+\["parley"\]', r) is not None, where, f'{rt}: ENTRYPOINT must be ["parley"]')
        c.check(re.search(r"(?m)^VOLUME\s+.*/var/lib/parley", r) is not None, where, f"{rt}: must declare the /var/lib/parley volume")
    rx = body("runtime-xla")
    c.check("PJRT_PLUGIN_LIBRARY_PATH=" in rx, where, "runtime-xla: must set PJRT_PLUGIN_LIBRARY_PATH")
    c.check("PARLEY_BACKEND=xla" in rx, where, "runtime-xla: must select the xla backend")


# ---------------------------------------------------------------------------
# Kubernetes


def k8s_objects(deploy, rendered):
    if rendered:
        return load_all(rendered)
    k8s = os.path.join(deploy, "k8s")
    kz = load_one(os.path.join(k8s, "kustomization.yaml"))
    objs = []
    for r in kz.get("resources") or []:
        objs.extend(load_all(os.path.join(k8s, r)))
    return objs


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def pod_spec(obj):
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


def pod_labels(obj):
    return (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def check_k8s(c, deploy, rendered):
    objs = k8s_objects(deploy, rendered)
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o.get("kind"), {})[(o.get("metadata") or {}).get("name")] = o
    where = "k8s"
    for kind in ["Namespace", "ConfigMap", "Deployment", "StatefulSet", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "PersistentVolumeClaim"]:
        c.check(kind in by_kind, where, f"no {kind}")
    workloads = {**by_kind.get("Deployment", {}), **by_kind.get("StatefulSet", {})}
    configmaps = by_kind.get("ConfigMap", {})
    secrets = by_kind.get("Secret", {})
    pvcs = by_kind.get("PersistentVolumeClaim", {})
    services = by_kind.get("Service", {})

    namespaces = {(o.get("metadata") or {}).get("namespace") for o in objs if o.get("kind") != "Namespace"}
    if rendered:
        c.check(namespaces == set(by_kind.get("Namespace", {}).keys()), where, f"objects are in namespaces {sorted(map(str, namespaces))}, not the one the Namespace creates")

    gateways = {n: w for n, w in workloads.items() if pod_labels(w).get("app.kubernetes.io/component") == "gateway"}
    learners = {n: w for n, w in workloads.items() if pod_labels(w).get("app.kubernetes.io/component") == "learner"}
    c.check(len(gateways) >= 2, where, "want a CPU and a GPU gateway Deployment")
    c.check(len(learners) == 1, where, "want exactly one learner workload")

    for name, w in workloads.items():
        wh = f"k8s {w['kind']}/{name}"
        spec = w.get("spec") or {}
        c.check(labels_match((spec.get("selector") or {}).get("matchLabels"), pod_labels(w)), wh, "selector does not match the pod template's labels")
        ps = pod_spec(w)
        sc = ps.get("securityContext") or {}
        c.check(sc.get("runAsNonRoot") is True, wh, "pods must set runAsNonRoot")
        volumes = {v["name"]: v for v in ps.get("volumes") or []}
        claim_templates = {(t.get("metadata") or {}).get("name") for t in spec.get("volumeClaimTemplates") or []}
        for v in volumes.values():
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                c.check(claim in pvcs, wh, f"volume {v['name']}: PersistentVolumeClaim {claim!r} does not exist")
        for ctr in ps.get("containers") or []:
            ch = f"{wh} container {ctr.get('name')}"
            image = ctr.get("image", "")
            if rendered:
                c.check(":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), ch, f"image {image!r} has no pinned tag")
            csc = ctr.get("securityContext") or {}
            c.check(csc.get("allowPrivilegeEscalation") is False, ch, "allowPrivilegeEscalation must be false")
            c.check("ALL" in ((csc.get("capabilities") or {}).get("drop") or []), ch, "must drop ALL capabilities")
            res = ctr.get("resources") or {}
            c.check("cpu" in (res.get("requests") or {}) and "memory" in (res.get("requests") or {}), ch, "must request cpu and memory")
            c.check("memory" in (res.get("limits") or {}), ch, "must limit memory")
            for m in ctr.get("volumeMounts") or []:
                c.check(m["name"] in volumes or m["name"] in claim_templates, ch, f"mounts undefined volume {m['name']!r}")
            for ef in ctr.get("envFrom") or []:
                if "configMapRef" in ef:
                    c.check(ef["configMapRef"]["name"] in configmaps, ch, f"ConfigMap {ef['configMapRef']['name']!r} does not exist")
                if "secretRef" in ef:
                    ref = ef["secretRef"]
                    c.check(ref["name"] in secrets or ref.get("optional") is True, ch, f"Secret {ref['name']!r} does not exist and is not optional")
            env = {e["name"]: e.get("value") for e in ctr.get("env") or []}
            for ef in ctr.get("envFrom") or []:
                if "configMapRef" in ef and ef["configMapRef"]["name"] in configmaps:
                    for k, v in (configmaps[ef["configMapRef"]["name"]].get("data") or {}).items():
                        env.setdefault(k, v)
            mounts = {m["mountPath"]: m for m in ctr.get("volumeMounts") or []}
            registry = env.get("PARLEY_REGISTRY")
            c.check(registry in mounts, ch, f"the registry path {registry!r} is not mounted")
            for k in ["PARLEY_KAFKA_BROKERS", "PARLEY_REDIS_ADDR", "PARLEY_DEPLOYMENT"]:
                c.check(bool(env.get(k)), ch, f"{k} is not set")
            if name in gateways:
                ports = {p.get("name"): p.get("containerPort") for p in ctr.get("ports") or []}
                c.check(ports.get("http") == 8080, ch, "must expose port http=8080")
                c.check(str(env.get("PARLEY_ADDR", "")).endswith(":8080"), ch, "PARLEY_ADDR must listen on :8080")
                rp = ((ctr.get("readinessProbe") or {}).get("httpGet") or {}).get("path")
                lp = ((ctr.get("livenessProbe") or {}).get("httpGet") or {}).get("path")
                c.check(rp == "/readyz", ch, "readinessProbe must GET /readyz (a model is loaded)")
                c.check(lp == "/healthz", ch, "livenessProbe must GET /healthz")
                c.check(registry in mounts and mounts[registry].get("readOnly") is True, ch, "gateways must mount the registry read-only")
                spool = env.get("PARLEY_DATA_DIR", "")  # the spool is <data dir>/spool
                c.check(any(spool.startswith(p.rstrip("/") + "/") or spool == p for p in mounts if p != registry), ch, f"the spool {spool!r} is not on a volume")
                c.check(int(ps.get("terminationGracePeriodSeconds", 30)) > 30, ch, "terminationGracePeriodSeconds must exceed the gateway's 30 s shutdown timeout")
            if name in learners:
                data = env.get("PARLEY_DATA_DIR")
                c.check(data in mounts and mounts[data]["name"] in claim_templates | {v for v, vol in volumes.items() if "persistentVolumeClaim" in vol}, ch,
                        f"the learner's data dir {data!r} must be on a PersistentVolumeClaim")
                c.check(registry in mounts and not mounts[registry].get("readOnly"), ch, "the learner must mount the registry read-write")
        is_gpu = any("nvidia.com/gpu" in ((ctr.get("resources") or {}).get("limits") or {}) for ctr in ps.get("containers") or [])
        if name in gateways and is_gpu:
            ctr = ps["containers"][0]
            env = {e["name"]: e.get("value") for e in ctr.get("env") or []}
            c.check(bool(ps.get("nodeSelector")), wh, "a GPU gateway needs a nodeSelector for the GPU pool")
            c.check(any(t.get("key") == "nvidia.com/gpu" for t in ps.get("tolerations") or []), wh, "a GPU gateway must tolerate the nvidia.com/gpu taint")
            c.check(bool(env.get("PJRT_PLUGIN_LIBRARY_PATH")), wh, "a GPU gateway must set PJRT_PLUGIN_LIBRARY_PATH")
            args = " ".join(ctr.get("args") or [])
            c.check("--plugin" in args or bool(env.get("PARLEY_PLUGIN")), wh, "a GPU gateway must name its PJRT plugin file (PARLEY_PLUGIN or --plugin)")
            c.check("--backend xla" in args or "--backend=xla" in args or env.get("PARLEY_BACKEND") == "xla", wh, "a GPU gateway must run --backend xla")
    c.check(any(
        any("nvidia.com/gpu" in ((ctr.get("resources") or {}).get("limits") or {}) for ctr in pod_spec(w).get("containers") or [])
        for w in gateways.values()), where, "no gateway asks for nvidia.com/gpu")

    # The learner's StatefulSet needs its headless Service.
    for name, w in by_kind.get("StatefulSet", {}).items():
        svc = services.get((w.get("spec") or {}).get("serviceName"))
        c.check(svc is not None and (svc.get("spec") or {}).get("clusterIP") == "None", f"k8s StatefulSet/{name}", "serviceName must name a headless Service")

    # Services select pods that exist and target named ports they have.
    for name, svc in services.items():
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            c.check(bool(spec.get("externalName")), f"k8s Service/{name}", "ExternalName without a name")
            continue
        sel = spec.get("selector") or {}
        matched = [w for w in workloads.values() if labels_match(sel, pod_labels(w))]
        c.check(bool(matched), f"k8s Service/{name}", f"selector {sel} matches no pods")
        for p in spec.get("ports") or []:
            tp = p.get("targetPort")
            if isinstance(tp, str):
                for w in matched:
                    names = {pp.get("name") for ctr in pod_spec(w).get("containers") or [] for pp in ctr.get("ports") or []}
                    c.check(tp in names, f"k8s Service/{name}", f"targetPort {tp!r} is not a port of {w['metadata']['name']}")
    for gname, g in gateways.items():
        c.check(any(labels_match((s.get("spec") or {}).get("selector"), pod_labels(g)) for s in services.values()), where, f"no Service sends traffic to {gname}")

    # Every gateway pod is covered by exactly one PodDisruptionBudget.
    pdbs = by_kind.get("PodDisruptionBudget", {})
    for gname, g in gateways.items():
        covering = [p for p, pdb in pdbs.items() if labels_match(((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels"), pod_labels(g))]
        c.check(len(covering) == 1, f"k8s Deployment/{gname}", f"covered by {len(covering)} PodDisruptionBudgets {covering}, want exactly 1")

    # The HPA scales the CPU gateway on CPU and never below the PDB's budget.
    hpas = by_kind.get("HorizontalPodAutoscaler", {})
    for name, h in hpas.items():
        spec = h.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        c.check(ref.get("kind") == "Deployment" and ref.get("name") in by_kind.get("Deployment", {}), f"k8s HPA/{name}", f"scaleTargetRef {ref} is not a Deployment here")
        c.check(any(m.get("type") == "Resource" and (m.get("resource") or {}).get("name") == "cpu" for m in spec.get("metrics") or []), f"k8s HPA/{name}", "must scale on CPU")
        c.check(int(spec.get("minReplicas", 1)) >= 2, f"k8s HPA/{name}", "minReplicas below 2 leaves no gateway during a disruption")
        target = by_kind.get("Deployment", {}).get(ref.get("name"))
        if target:
            c.check(ref.get("name") in gateways, f"k8s HPA/{name}", "scales something other than a gateway")

    # The registry is one ReadWriteMany claim.
    reg_claims = {(v.get("persistentVolumeClaim") or {}).get("claimName")
                  for w in workloads.values() for v in pod_spec(w).get("volumes") or []
                  for ctr in pod_spec(w).get("containers") or [] for m in ctr.get("volumeMounts") or []
                  if m["name"] == v["name"] and m["mountPath"].endswith("/registry")}
    reg_claims.discard(None)
    c.check(len(reg_claims) == 1, where, f"the gateways and the learner must share one registry claim, got {sorted(reg_claims)}")
    for claim in reg_claims:
        if claim in pvcs:
            c.check("ReadWriteMany" in ((pvcs[claim].get("spec") or {}).get("accessModes") or []), f"k8s PVC/{claim}", "the registry must be ReadWriteMany")


# ---------------------------------------------------------------------------
# PARLEY_* variables against the flags of a built binary


def flags_of(binary, command):
    """Returns the long flags `parley COMMAND --help` lists (global ones too)."""
    out = subprocess.run([binary, *command.split(), "--help"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ValueError(f"{binary} {command} --help: exit {out.returncode}: {out.stderr.strip()[:200]}")
    return set(re.findall(r"(?m)^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)", out.stdout))


def env_flag(name):
    """PARLEY_DATA_DIR → data-dir."""
    return name[len("PARLEY_"):].lower().replace("_", "-")


def check_flags(c, deploy, rendered, binary):
    """Every PARLEY_* variable and --flag the manifests give `parley gateway`
    and `parley learner` must be a flag that one of them has; the variables
    each role depends on must be flags of that role."""
    flags = {cmd: flags_of(binary, cmd) for cmd in ("gateway", "learner")}
    either = flags["gateway"] | flags["learner"]
    needed = {
        "gateway": ["PARLEY_ADDR", "PARLEY_REDIS_ADDR", "PARLEY_KAFKA_BROKERS", "PARLEY_REGISTRY", "PARLEY_DATA_DIR", "PARLEY_DEPLOYMENT"],
        "learner": ["PARLEY_REDIS_ADDR", "PARLEY_KAFKA_BROKERS", "PARLEY_REGISTRY", "PARLEY_DATA_DIR"],
    }
    uses = []  # (where, role, env names, args)
    compose = load_one(os.path.join(deploy, "docker-compose.yml"))
    for name, svc in (compose.get("services") or {}).items():
        cmd = as_text(svc.get("command")).split()
        if cmd[:1] in (["gateway"], ["learner"]):
            uses.append((f"docker-compose.yml {name}", cmd[0], list(env_of(svc)), cmd[1:]))
    objs = k8s_objects(deploy, rendered)
    configmaps = {o["metadata"]["name"]: o.get("data") or {} for o in objs if o.get("kind") == "ConfigMap"}
    for o in objs:
        if o.get("kind") not in ("Deployment", "StatefulSet"):
            continue
        for ctr in pod_spec(o).get("containers") or []:
            args = ctr.get("args") or []
            if args[:1] not in (["gateway"], ["learner"]):
                continue
            names = [e["name"] for e in ctr.get("env") or []]
            for ef in ctr.get("envFrom") or []:
                names += list(configmaps.get((ef.get("configMapRef") or {}).get("name"), {}))
            uses.append((f"k8s {o['kind']}/{o['metadata']['name']}", args[0], names, args[1:]))
    for where, role, names, args in uses:
        for n in names:
            if n.startswith("PARLEY_"):
                c.check(env_flag(n) in either, where, f"{n}: neither `parley gateway` nor `parley learner` has --{env_flag(n)}")
        for n in needed[role]:
            if n in names:
                c.check(env_flag(n) in flags[role], where, f"{n}: `parley {role}` has no --{env_flag(n)}")
        for a in args:
            if a.startswith("--"):
                flag = a[2:].split("=", 1)[0]
                c.check(flag in flags[role], where, f"`parley {role}` has no {a.split('=', 1)[0]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deploy", required=True, help="the deploy/ folder")
    ap.add_argument("--k8s-rendered", help="output of `kubectl kustomize deploy/k8s`")
    ap.add_argument("--binary", help="a built parley: also check every PARLEY_* variable and flag against its --help")
    ap.add_argument("--only", choices=["compose", "otel", "dockerfile", "k8s", "flags"], action="append", help="run only these groups")
    args = ap.parse_args()
    c = Checker()
    groups = args.only or ["compose", "otel", "dockerfile", "k8s"] + (["flags"] if args.binary else [])
    for g in groups:
        try:
            if g == "compose":
                check_compose(c, args.deploy)
            elif g == "otel":
                check_prometheus(c, args.deploy, check_otel(c, args.deploy))
            elif g == "dockerfile":
                check_dockerfile(c, args.deploy)
            elif g == "k8s":
                check_k8s(c, args.deploy, args.k8s_rendered)
            elif g == "flags":
                if not args.binary:
                    raise ValueError("--only flags needs --binary")
                check_flags(c, args.deploy, args.k8s_rendered, args.binary)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError, subprocess.SubprocessError) as e:
            c.failures.append(f"{g}: cannot check: {type(e).__name__}: {e}")
    for f in c.failures:
        print(f"FAIL {f}")
    print(f"structure: {c.passed} passed, {len(c.failures)} failed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
