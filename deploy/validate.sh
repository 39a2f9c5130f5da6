#!/usr/bin/env bash
# Validates deploy/ offline: no Docker engine, no cluster, no network beyond
# the npm registry for the first install of the Node checkers.
#
#   deploy/validate.sh                  # every check whose tool is installed
#   deploy/validate.sh --binary bin/parley
#                                       # also: every PARLEY_* variable and flag the
#                                       # manifests give gateway/learner is a real flag
#   deploy/validate.sh --install        # first apt-get install the Debian tools
#                                       # (docker-compose, yamllint, shellcheck, promtool)
#
# Each step prints PASS, FAIL or SKIP (its tool is missing: how to get it is
# printed). Exits 1 when any step failed, 0 otherwise. Steps:
#   yamllint       every YAML file (deploy/validate/yamllint.yaml)
#   compose        `docker compose config` or Debian's `docker-compose config`
#   compose-spec   the Compose Specification's loader and schema (compose-go, via `go run`)
#   promtool       `promtool check config prometheus.yml`
#   grafana        the dashboards in grafana/ (validate/grafana.py), their PromQL
#                  parsed by `promtool check rules`
#   otelcol        `otelcol-contrib validate` of otel-collector.yaml (when one is installed)
#   kustomize      `kubectl kustomize deploy/k8s` renders
#   k8s-schema     every Kubernetes object against the API schemas
#                  (kubernetes-models) and field lists (@kubernetes/client-node)
#   dockerfile     Dockerfile lint (dockerfile-utils)
#   structure      Parley's own rules across the files (validate/structure.py)
#   self-test      the checkers catch known mistakes (testdata/, structure_test.py)
#   lint-script    this script, with ShellCheck
set -uo pipefail

DEPLOY="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
COMPOSE_SPEC=github.com/compose-spec/compose-go/v2/cmd@v2.16.2
VALIDATE="$DEPLOY/validate"
BINARY=""
INSTALL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
    --binary=*) BINARY="${1#--binary=}"; shift ;;
    --install) INSTALL=1; shift ;;
    -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "validate.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# The steps run in deploy/: a relative --binary is relative to where we started.
if [ -n "$BINARY" ] && [ "${BINARY#/}" = "$BINARY" ]; then
  BINARY="$PWD/$BINARY"
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
PASSED=0 FAILED=0 SKIPPED=0
FAILED_STEPS=()

pass() { PASSED=$((PASSED + 1)); echo "PASS $1"; }
fail() { FAILED=$((FAILED + 1)); FAILED_STEPS+=("$1"); echo "FAIL $1"; }
skip() { SKIPPED=$((SKIPPED + 1)); echo "SKIP $1: $2"; }
have() { command -v "$1" >/dev/null 2>&1; }

# step NAME CMD... runs CMD, shows its output indented, and records the result.
step() {
  local name="$1"; shift
  echo "---- $name: $*"
  if "$@" >"$TMP/out" 2>&1; then
    sed 's/^/  /' "$TMP/out"
    pass "$name"
  else
    sed 's/^/  /' "$TMP/out"
    fail "$name"
  fi
}

# step_fails NAME WANT CMD... passes when CMD fails and its output contains WANT.
step_fails() {
  local name="$1" want="$2"; shift 2
  echo "---- $name (must fail): $*"
  if "$@" >"$TMP/out" 2>&1; then
    sed 's/^/  /' "$TMP/out"
    echo "  the command passed; it must reject this input"
    fail "$name"
  elif grep -qF -- "$want" "$TMP/out"; then
    tail -n 3 "$TMP/out" | sed 's/^/  /'
    pass "$name"
  else
    sed 's/^/  /' "$TMP/out"
    echo "  the output does not say: $want"
    fail "$name"
  fi
}

if [ "$INSTALL" = 1 ]; then
  echo "---- install: apt-get install docker-compose yamllint shellcheck prometheus"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    docker-compose yamllint shellcheck prometheus >/dev/null || echo "  apt-get failed; the steps below skip what is missing"
fi

cd "$DEPLOY" || exit 1

# ---- YAML syntax and style
if have yamllint; then
  step yamllint yamllint -c validate/yamllint.yaml docker-compose.yml otel-collector.yaml prometheus.yml k8s/ validate/yamllint.yaml
else
  skip yamllint "not installed (apt-get install yamllint)"
fi

# ---- docker compose: the Compose v2 plugin if present, else Debian's docker-compose (v1.29)
if have docker && docker compose version >/dev/null 2>&1; then
  step compose docker compose -f docker-compose.yml config --quiet
  step compose-services docker compose -f docker-compose.yml config --services
elif have docker-compose; then
  step compose docker-compose -f docker-compose.yml config --quiet
  step compose-services docker-compose -f docker-compose.yml config --services
else
  skip compose "neither the docker compose plugin nor docker-compose (apt-get install docker-compose)"
fi
if have docker-compose || { have docker && docker compose version >/dev/null 2>&1; }; then
  if have docker && docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
  step_fails compose-self-test "restartt" "${compose[@]}" -f validate/testdata/bad-compose.yml config --quiet
fi

# ---- The Compose Specification's own loader and JSON schema (what Compose v2
# runs), built from the Go module proxy on first use.
if have go; then
  compose_spec() { go run "$COMPOSE_SPEC" -format json "$1" >"$TMP/spec.json" && echo "$1: loads and matches the Compose Specification schema"; }
  step compose-spec compose_spec docker-compose.yml
  step_fails compose-spec-self-test "restartt" go run "$COMPOSE_SPEC" validate/testdata/bad-compose.yml
else
  skip compose-spec "go not installed"
fi

# ---- Prometheus configuration
if have promtool; then
  step promtool promtool check config prometheus.yml
else
  skip promtool "not installed (apt-get install prometheus)"
fi

# ---- Grafana dashboards: structure, and their PromQL parsed by promtool
if have python3; then
  step grafana python3 "$VALIDATE/grafana.py" grafana/*.json --rules "$TMP/dashboard-rules.yml"
  step_fails grafana-self-test "4 problem(s)" python3 "$VALIDATE/grafana.py" validate/testdata/bad-dashboard.json --rules "$TMP/bad-rules.yml"
  if have promtool; then
    step grafana-promql promtool check rules "$TMP/dashboard-rules.yml"
    step_fails grafana-promql-self-test "unclosed left parenthesis" promtool check rules "$TMP/bad-rules.yml"
  else
    skip grafana-promql "promtool not installed (apt-get install prometheus)"
  fi
else
  skip grafana "python3 not installed"
fi

# ---- The collector's own validation, where a collector binary is at hand
# (otelcol-contrib on the PATH, or OTELCOL=/path/to/collector).
OTELCOL="${OTELCOL:-$(command -v otelcol-contrib || true)}"
if [ -n "$OTELCOL" ]; then
  step otelcol "$OTELCOL" validate --config="$DEPLOY/otel-collector.yaml"
else
  skip otelcol "no collector binary (put otelcol-contrib on the PATH or set OTELCOL); structure checks the pipelines"
fi

# ---- Kustomize rendering
RENDERED=""
if have kubectl; then
  if kubectl kustomize k8s >"$TMP/rendered.yaml" 2>"$TMP/kustomize.err"; then
    RENDERED="$TMP/rendered.yaml"
    echo "---- kustomize: kubectl kustomize k8s"
    echo "  $(grep -c '^kind:' "$RENDERED") objects: $(grep '^kind:' "$RENDERED" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}' | sed 's/, $//')"
    pass kustomize
  else
    sed 's/^/  /' "$TMP/kustomize.err"
    fail kustomize
  fi
else
  skip kustomize "kubectl not installed; the checks below read the k8s files one by one"
fi

# ---- Node checkers: Kubernetes schemas and Dockerfile lint
NODE_OK=0
if have node && have npm; then
  if [ -d "$VALIDATE/node_modules/kubernetes-models" ] && [ -d "$VALIDATE/node_modules/@kubernetes/client-node" ] \
    && [ -d "$VALIDATE/node_modules/dockerfile-utils" ]; then
    NODE_OK=1
  elif (cd "$VALIDATE" && npm ci --no-audit --no-fund --loglevel=error >"$TMP/npm.log" 2>&1); then
    NODE_OK=1
  else
    sed 's/^/  /' "$TMP/npm.log" | tail -n 5
    skip k8s-schema "npm ci in deploy/validate failed (no registry?)"
    skip dockerfile "npm ci in deploy/validate failed (no registry?)"
  fi
else
  skip k8s-schema "node and npm not installed (apt-get install nodejs npm)"
  skip dockerfile "node and npm not installed (apt-get install nodejs npm)"
fi
if [ "$NODE_OK" = 1 ]; then
  if [ -n "$RENDERED" ]; then
    step k8s-schema node "$VALIDATE/k8s.mjs" "$RENDERED" k8s/*.example.yaml
  else
    step k8s-schema node "$VALIDATE/k8s.mjs" k8s/*.yaml
  fi
  step_fails k8s-schema-self-test "0 passed, 6 failed" node "$VALIDATE/k8s.mjs" validate/testdata/bad-k8s.yaml
  step dockerfile node "$VALIDATE/dockerfile.mjs" Dockerfile
  step_fails dockerfile-self-test "4 error(s)" node "$VALIDATE/dockerfile.mjs" validate/testdata/bad.Dockerfile
fi

# ---- Parley's own structural rules
if have python3 && python3 -c 'import yaml' 2>/dev/null; then
  args=(--deploy "$DEPLOY")
  [ -n "$RENDERED" ] && args+=(--k8s-rendered "$RENDERED")
  step structure python3 "$VALIDATE/structure.py" "${args[@]}"
  step structure-self-test python3 -m unittest discover -s "$VALIDATE" -p 'structure_test.py'
  if [ -n "$BINARY" ]; then
    step flags python3 "$VALIDATE/structure.py" "${args[@]}" --binary "$BINARY" --only flags
  else
    skip flags "no --binary given (deploy/validate.sh --binary bin/parley)"
  fi
else
  skip structure "python3 with PyYAML not installed (apt-get install python3-yaml)"
fi

# ---- this script
if have shellcheck; then
  step lint-script shellcheck "$DEPLOY/validate.sh"
else
  skip lint-script "shellcheck not installed (apt-get install shellcheck)"
fi

echo
if [ "$FAILED" -gt 0 ]; then
  echo "failed steps: ${FAILED_STEPS[*]}"
fi
echo "deploy-check: $PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" -eq 0 ]
