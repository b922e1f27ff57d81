#!/usr/bin/env bash
# `make demo`: start devcluster, install example resources, show them, run until Ctrl-C.
# Everything it starts is stopped when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_DIR=${DEMO_DIR:-.demo}
LISTEN=${DEVCLUSTER_LISTEN:-127.0.0.1:6443}
mkdir -p "$DEMO_DIR"
export KUBECONFIG="$PWD/$DEMO_DIR/kubeconfig"
rm -f "$KUBECONFIG"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

./target/debug/devcluster serve --listen "$LISTEN" --kubeconfig "$KUBECONFIG" >"$DEMO_DIR/devcluster.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  [ -s "$KUBECONFIG" ] && break
  sleep 0.1
done
if [ ! -s "$KUBECONFIG" ]; then
  echo "devcluster did not start; see $DEMO_DIR/devcluster.log:" >&2
  cat "$DEMO_DIR/devcluster.log" >&2
  exit 1
fi
echo "devcluster is up at https://$LISTEN"
kubectl get namespaces
echo
echo "Installing an example CustomResourceDefinition and a Widget:"
kubectl apply -f examples/devcluster/widget-crd.yaml
kubectl wait --for=condition=Established crd/widgets.example.com --timeout=30s
kubectl apply -f examples/devcluster/widget.yaml
kubectl get widgets
echo
echo "The cluster keeps running until Ctrl-C. In another terminal:"
echo "  export KUBECONFIG=$KUBECONFIG"
echo "  kubectl get widgets -o yaml"
echo "  kubectl explain widget.spec"
if [ "${DEMO_EXIT_AFTER_SETUP:-}" = "1" ]; then
  exit 0
fi
wait "${pids[0]}"
