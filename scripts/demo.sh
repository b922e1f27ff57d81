#!/usr/bin/env bash
# `make demo`: start devcluster, install Vesper (CRD, RBAC), run its operator with a preview
# domain, create two previews, show them Ready with their URLs; install Varroa (CRDs, RBAC, a
# gateway CA), run its operator, bring up two Jenkins controllers and show them; keep running
# until Ctrl-C. Everything it starts is stopped when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_DIR=${DEMO_DIR:-.demo}
mkdir -p "$DEMO_DIR"
DEMO_DIR=$(cd "$DEMO_DIR" && pwd)
# The workspace's binaries, wherever cargo puts them (CARGO_TARGET_DIR, build.target-dir).
TARGET_DIR=$("${CARGO:-cargo}" metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
BIN="$TARGET_DIR/debug"
for b in devcluster vesper-operator vesperctl varroa-operator varroa; do
  if [ ! -x "$BIN/$b" ]; then
    echo "$BIN/$b is missing: run \`make demo\` (it builds them) or \`cargo build --workspace --bins\`" >&2
    exit 1
  fi
done
# An address given in DEVCLUSTER_LISTEN is used as it is (devcluster says so if it is taken);
# the default port 6443, when something else holds it, gives way to a free port.
DEFAULT_LISTEN=${DEMO_DEFAULT_LISTEN:-127.0.0.1:6443}
if [ -n "${DEVCLUSTER_LISTEN:-}" ]; then
  LISTEN=$DEVCLUSTER_LISTEN
elif (exec 3<>"/dev/tcp/${DEFAULT_LISTEN%:*}/${DEFAULT_LISTEN##*:}") 2>/dev/null; then
  LISTEN=${DEFAULT_LISTEN%:*}:0
  echo "== ${DEFAULT_LISTEN} is taken (another devcluster or API server?); devcluster picks a free port"
else
  LISTEN=$DEFAULT_LISTEN
fi
DOMAIN=${VESPER_PREVIEW_DOMAIN:-preview.example.com}
export KUBECONFIG="$DEMO_DIR/kubeconfig"
rm -f "$KUBECONFIG" "$DEMO_DIR/pids"

pids=()
cleanup() {
  # Newest first: the operators stop before the cluster they talk to.
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill "${pids[$i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

"$BIN"/devcluster serve --listen "$LISTEN" --kubeconfig "$KUBECONFIG" --nodes 3 \
  --fault 'registry.example.com/shop:broken=crash-loop:1' >"$DEMO_DIR/devcluster.log" 2>&1 &
pids+=($!)
echo "$!" >>"$DEMO_DIR/pids"
for _ in $(seq 1 100); do
  [ -s "$KUBECONFIG" ] && break
  sleep 0.1
done
if [ ! -s "$KUBECONFIG" ]; then
  echo "devcluster did not start; see $DEMO_DIR/devcluster.log:" >&2
  cat "$DEMO_DIR/devcluster.log" >&2
  exit 1
fi
SERVER=$(sed -n 's/^ *server: *//p' "$KUBECONFIG" | head -n 1)
echo "== devcluster is up at $SERVER (3 simulated nodes; binaries from $BIN)"
kubectl get nodes

echo
echo "== Installing Vesper: the CRD and the operator's RBAC"
kubectl apply -f deploy/vesper/crd.yaml
kubectl wait --for=condition=Established crd/previewenvironments.vesper.eventide.dev --timeout=30s
kubectl apply -f deploy/vesper/rbac.yaml
kubectl create namespace ingress-nginx --dry-run=client -o yaml | kubectl apply -f -

echo
echo "== Starting vesper-operator (as its ServiceAccount) with --preview-domain $DOMAIN"
echo "   (and a 45s progress deadline, so the broken build below fails within a minute)"
TOKEN=$("$BIN"/devcluster token vesper-system/vesper-operator --kubeconfig "$KUBECONFIG" --duration 86400)
OPERATOR_KUBECONFIG="$DEMO_DIR/operator.kubeconfig"
sed "s|token: .*|token: $TOKEN|" "$KUBECONFIG" >"$OPERATOR_KUBECONFIG"
KUBECONFIG="$OPERATOR_KUBECONFIG" "$BIN"/vesper-operator --preview-domain "$DOMAIN" \
  --ingress-class nginx --metrics-addr 127.0.0.1:0 --health-addr 127.0.0.1:0 \
  --progress-deadline-seconds 45 >"$DEMO_DIR/operator.log" 2>&1 &
pids+=($!)
echo "$!" >>"$DEMO_DIR/pids"

echo
echo "== Creating two previews with vesperctl (it waits until each is Ready)"
VESPERCTL="$BIN/vesperctl"
"$VESPERCTL" create shop-pr-42 --image registry.example.com/shop:pr-42 --replicas 2 --ttl 24h \
  --env FEATURE_FLAGS=new-checkout --readiness-path /healthz --wait --timeout 60s
"$VESPERCTL" create docs-pr-7 \
  --image registry.example.com/docs@sha256:4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a4d3c2b1a \
  --ttl 90m --wait --timeout 60s
echo
"$VESPERCTL" list
echo
NS=$(kubectl get pe shop-pr-42 -o jsonpath='{.status.namespace}')
echo "== What shop-pr-42 got, in namespace $NS"
kubectl get deploy,svc,ing,quota,limitrange,netpol -n "$NS"

echo
echo "== Installing Varroa: its CRDs, the operator's RBAC and a gateway CA (varroa-operator gateway-ca)"
kubectl apply -f deploy/varroa/crds.yaml >/dev/null
kubectl wait --for=condition=Established crd -l '' --all --timeout=30s >/dev/null
kubectl apply -f deploy/varroa/rbac.yaml
"$BIN"/varroa-operator gateway-ca | kubectl apply -f -

echo
echo "== Starting varroa-operator (as its ServiceAccount)"
VARROA_TOKEN=$("$BIN"/devcluster token varroa-system/varroa-operator --kubeconfig "$KUBECONFIG" --duration 86400)
VARROA_KUBECONFIG="$DEMO_DIR/varroa-operator.kubeconfig"
sed "s|token: .*|token: $VARROA_TOKEN|" "$KUBECONFIG" >"$VARROA_KUBECONFIG"
KUBECONFIG="$VARROA_KUBECONFIG" "$BIN"/varroa-operator --health-addr 127.0.0.1:0 \
  >"$DEMO_DIR/varroa-operator.log" 2>&1 &
pids+=($!)
echo "$!" >>"$DEMO_DIR/pids"

echo
echo "== Two Jenkins controllers from the example configuration (docs/varroa/examples)"
kubectl apply -f docs/varroa/examples/
if ! kubectl wait --for=jsonpath='{.status.phase}'=Running controllers.varroa.dev/team-a \
  controllers.varroa.dev/sandbox -n team-a --timeout=120s; then
  echo "the controllers did not reach Running; see $DEMO_DIR/varroa-operator.log:" >&2
  tail -n 40 "$DEMO_DIR/varroa-operator.log" >&2
  exit 1
fi
echo
VARROA="$BIN/varroa"
"$VARROA" get controllers -A
echo "   (they stop at Running: the mite sidecar streams to Varroa's gateway, which is not built"
echo "    yet, so none reaches Connected)"
echo
echo "== Where team-a's settings came from (varroa-operator render, an excerpt)"
"$BIN"/varroa-operator render -f docs/varroa/examples --controller team-a/team-a |
  awk '/^  Plugins:/ { done = 1 } !done && !/^  Bundle|^    ComposedBundle/'

echo
echo "The cluster and the operators keep running until Ctrl-C. In another terminal:"
echo "  export KUBECONFIG=$KUBECONFIG PATH=$BIN:\$PATH"
echo "  vesperctl list                                  # previews, their URLs and expiry"
echo "  vesperctl describe shop-pr-42                   # conditions, events, the objects it owns"
echo "  vesperctl extend shop-pr-42 --by 2h             # push the expiry back (at most 7 days)"
echo "  vesperctl apply shop-pr-42 --image registry.example.com/shop:broken --wait --timeout 2m"
echo "                                                  # a broken build: fails with its reason, exit 1"
echo "  vesperctl delete docs-pr-7 --wait               # the namespace and everything in it go"
echo "  kubectl vesper get                              # the same tool as a kubectl plugin, after:"
echo "  ln -s $BIN/vesperctl $BIN/kubectl-vesper"
echo "  varroa get controllers -A                       # Varroa's Jenkins controllers, their phase"
echo "  varroa describe controller team-a -n team-a     # status, conditions, settings and their origin, events"
echo "  varroa stop sandbox -n team-a --wait            # scaled to zero (volume and configuration stay);"
echo "  varroa start sandbox -n team-a --wait           # and back"
echo "  varroa-operator render -f docs/varroa/examples  # the resolved configuration, without a cluster"
if [ "${DEMO_EXIT_AFTER_SETUP:-}" = "1" ]; then
  exit 0
fi
wait "${pids[0]}"
