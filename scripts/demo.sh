#!/usr/bin/env bash
# `make demo`: start devcluster, install Vesper (CRD, RBAC), run its operator with a preview
# domain, create two previews, show them Ready with their URLs; install Varroa (CRDs, RBAC, a
# gateway CA), start its control link (NATS with JetStream, the gateway), its build record store
# (PostgreSQL and varroa-recorder; console logs in a directory) and its operator, bring up two
# Jenkins controllers, show them Connected through their mites, run builds on them and show their
# records, a log and the activity; keep running until Ctrl-C. Everything it starts is stopped
# when it exits.
#
# No Jenkins can run here: devcluster's process runtime runs each Jenkins pod's containers as
# local processes, the `jenkins` container as the Jenkins double (varroa-jenkins-double, the
# Jenkins HTTP API the mite uses) and plugins-init, casc-init and the mite as the real
# varroa-mite. Plugins come from the double's stand-in update site.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_DIR=${DEMO_DIR:-.demo}
mkdir -p "$DEMO_DIR"
DEMO_DIR=$(cd "$DEMO_DIR" && pwd)
# The workspace's binaries, wherever cargo puts them (CARGO_TARGET_DIR, build.target-dir).
TARGET_DIR=$("${CARGO:-cargo}" metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
BIN="$TARGET_DIR/debug"
for b in devcluster vesper-operator vesperctl varroa-operator varroa varroa-gateway varroa-mite varroa-jenkins-double varroa-recorder; do
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
# A current nats-server with JetStream (Debian's 2.9 is too old): `make deps` installs one.
NATS_SERVER=${VARROA_NATS_SERVER:-$PWD/.tools/bin/nats-server}
if [ ! -x "$NATS_SERVER" ]; then
  echo "$NATS_SERVER is missing: run \`make deps\` (it installs nats-server into .tools/bin) or set VARROA_NATS_SERVER" >&2
  exit 1
fi
# PostgreSQL for the build record store: the newest /usr/lib/postgresql/*/bin (`make deps`
# installs it) or VARROA_PG_BIN.
PG_BIN=${VARROA_PG_BIN:-}
if [ -z "$PG_BIN" ]; then
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && PG_BIN=$d; done
fi
if [ ! -x "$PG_BIN/initdb" ]; then
  echo "PostgreSQL's initdb is missing: run \`make deps\` (it installs postgresql) or set VARROA_PG_BIN" >&2
  exit 1
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

# The Jenkins pods' images run as local processes (devcluster's process runtime); the previews'
# images stay simulated.
"$BIN"/devcluster serve --listen "$LISTEN" --kubeconfig "$KUBECONFIG" --nodes 3 \
  --fault 'registry.example.com/shop:broken=crash-loop:1' \
  --run "jenkins/jenkins*=$BIN/varroa-jenkins-double" --run "ghcr.io/eventide/varroa-mite*=$BIN/varroa-mite" \
  >"$DEMO_DIR/devcluster.log" 2>&1 &
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
kubectl apply -f deploy/vesper/operator-rbac.yaml
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
kubectl apply -f deploy/varroa/operator-rbac.yaml
# The gateway runs outside the cluster here, on loopback, so its certificate also names 127.0.0.1.
"$BIN"/varroa-operator gateway-ca --gateway-tls-extra-name 127.0.0.1 | kubectl apply -f -

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() { # PORT WHAT LOG
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$2 did not start; see $3:" >&2
  tail -n 20 "$3" >&2
  exit 1
}

echo
echo "== Starting Varroa's control link: NATS with JetStream, and the gateway the mites dial"
NATS_PORT=$(free_port)
mkdir -p "$DEMO_DIR/nats"
"$NATS_SERVER" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$DEMO_DIR/nats" >"$DEMO_DIR/nats.log" 2>&1 &
pids+=($!)
echo "$!" >>"$DEMO_DIR/pids"
wait_port "$NATS_PORT" nats-server "$DEMO_DIR/nats.log"
NATS_URL="nats://127.0.0.1:$NATS_PORT"
GW_DIR="$DEMO_DIR/gateway"
mkdir -p "$GW_DIR"
for key in tls.crt tls.key ca.crt; do
  kubectl get secret varroa-gateway-tls -n varroa-system -o "jsonpath={.data.${key//./\\.}}" | base64 -d >"$GW_DIR/$key"
done
chmod 600 "$GW_DIR/tls.key"
GW_PORT=$(free_port)
"$BIN"/varroa-gateway --listen "127.0.0.1:$GW_PORT" --health-listen 127.0.0.1:0 \
  --tls-cert "$GW_DIR/tls.crt" --tls-key "$GW_DIR/tls.key" --tls-ca "$GW_DIR/ca.crt" \
  --nats-url "$NATS_URL" --cluster demo --replica demo-0 --log-store "file://$DEMO_DIR/logs" \
  >"$DEMO_DIR/gateway.log" 2>&1 &
pids+=($!)
echo "$!" >>"$DEMO_DIR/pids"
wait_port "$GW_PORT" varroa-gateway "$DEMO_DIR/gateway.log"
echo "   nats-server at $NATS_URL, varroa-gateway at 127.0.0.1:$GW_PORT (console logs in $DEMO_DIR/logs)"

echo
echo "== Starting the build record store: PostgreSQL, and varroa-recorder draining the streams into it"
PG_DIR="$DEMO_DIR/postgres"
rm -rf "$PG_DIR"
mkdir -p "$PG_DIR"
PG_PORT=$(free_port)
# initdb and postgres refuse to run as root: then they run as the postgres user.
as_pg=()
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$PG_DIR"
  as_pg=(runuser -u postgres --)
fi
(cd "$PG_DIR" && "${as_pg[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -A trust -U varroa -E UTF8 --locale=C \
  >"$DEMO_DIR/initdb.log" 2>&1) || { echo "initdb failed; see $DEMO_DIR/initdb.log" >&2; cat "$DEMO_DIR/initdb.log" >&2; exit 1; }
(cd "$PG_DIR" && exec "${as_pg[@]}" "$PG_BIN/postgres" -D "$PG_DIR/data" -p "$PG_PORT" -k "$PG_DIR" \
  -c listen_addresses=127.0.0.1) >"$DEMO_DIR/postgres.log" 2>&1 &
pids+=($!)
echo "$!" >>"$DEMO_DIR/pids"
wait_port "$PG_PORT" postgres "$DEMO_DIR/postgres.log"
export VARROA_DATABASE_URL="postgres://varroa@127.0.0.1:$PG_PORT/postgres"
# The recorder reads the gateway's log store too: it deletes the logs of the runs retention prunes.
"$BIN"/varroa-recorder run --database-url "$VARROA_DATABASE_URL" --nats-url "$NATS_URL" \
  --health-listen 127.0.0.1:0 --log-store "file://$DEMO_DIR/logs" >"$DEMO_DIR/recorder.log" 2>&1 &
pids+=($!)
echo "$!" >>"$DEMO_DIR/pids"
echo "   PostgreSQL at $VARROA_DATABASE_URL; varroa-recorder migrates it and drains varroa_builds and varroa_activity"

echo
echo "== Starting a stand-in Jenkins update site (stand-in plugin files and their digests)"
rm -f "$DEMO_DIR/update-site.url"
"$BIN"/varroa-jenkins-double update-site --plugins-from docs/varroa/examples \
  --url-file "$DEMO_DIR/update-site.url" >"$DEMO_DIR/update-site.log" 2>&1 &
pids+=($!)
echo "$!" >>"$DEMO_DIR/pids"
for _ in $(seq 1 100); do
  [ -s "$DEMO_DIR/update-site.url" ] && break
  sleep 0.1
done
UPDATE_SITE=$(cat "$DEMO_DIR/update-site.url")
echo "   $UPDATE_SITE"

echo
echo "== Starting varroa-operator (as its ServiceAccount; --build-records: build claims are on)"
VARROA_TOKEN=$("$BIN"/devcluster token varroa-system/varroa-operator --kubeconfig "$KUBECONFIG" --duration 86400)
VARROA_KUBECONFIG="$DEMO_DIR/varroa-operator.kubeconfig"
sed "s|token: .*|token: $VARROA_TOKEN|" "$KUBECONFIG" >"$VARROA_KUBECONFIG"
KUBECONFIG="$VARROA_KUBECONFIG" "$BIN"/varroa-operator --health-addr 127.0.0.1:0 --cluster demo --build-records \
  --nats-url "$NATS_URL" --gateway-endpoint "127.0.0.1:$GW_PORT" --default-update-site "$UPDATE_SITE" \
  >"$DEMO_DIR/varroa-operator.log" 2>&1 &
pids+=($!)
echo "$!" >>"$DEMO_DIR/pids"

echo
echo "== Two Jenkins controllers from the example configuration (docs/varroa/examples)"
echo "   (the version profile's lock relocked to the stand-in plugin files: varroa-jenkins-double relock)"
"$BIN"/varroa-jenkins-double relock docs/varroa/examples/00-version-profile.yaml | kubectl apply -f -
for f in docs/varroa/examples/*.yaml; do
  [ "$f" = docs/varroa/examples/00-version-profile.yaml ] || kubectl apply -f "$f"
done
if ! kubectl wait --for=jsonpath='{.status.phase}'=Connected controllers.varroa.dev/team-a \
  controllers.varroa.dev/sandbox -n team-a --timeout=180s; then
  echo "the controllers did not reach Connected; see $DEMO_DIR/varroa-operator.log, $DEMO_DIR/gateway.log" >&2
  echo "and \`kubectl logs -n team-a team-a-0 -c mite\`:" >&2
  tail -n 40 "$DEMO_DIR/varroa-operator.log" >&2
  kubectl get pods -n team-a >&2 || true
  exit 1
fi
echo
VARROA="$BIN/varroa"
"$VARROA" get controllers -A
echo "   (Connected: each mite streams to the gateway; the Jenkins container is the Jenkins double)"
echo
echo "== Where team-a's settings came from (varroa-operator render, an excerpt)"
"$BIN"/varroa-operator render -f docs/varroa/examples --controller team-a/team-a |
  awk '/^  Plugins:/ { done = 1 } !done && !/^  Bundle|^    ComposedBundle/'

echo
echo "== Builds on team-a: its Jenkins defines a job (as a seed job would) and runs 5 builds of it."
echo "   Each queued build asks a build claim (the recorder's ledger numbers it); its events go"
echo "   through the mite and the gateway to JetStream and the recorder into PostgreSQL, its console"
echo "   log to the log store."
export VARROA_LOG_STORE="file://$DEMO_DIR/logs"
JENKINS_IP=$(kubectl get pod team-a-0 -n team-a -o jsonpath='{.status.podIP}')
curl -fsS -X PUT "http://$JENKINS_IP:8080/__double/jobs" --data-binary @- >/dev/null <<'JOBS'
jobs:
  - name: team-a/app
    stages:
      - {name: Build, duration_ms: 300, console: ["Compiling 212 files", "BUILD SUCCESSFUL"]}
      - {name: Test, duration_ms: 400, console: ["Tests run: 48, Failures: 0, Skipped: 2"]}
    tests: {total: 48, failed: 0, skipped: 2}
JOBS
curl -fsS -X POST "http://$JENKINS_IP:8080/__double/builds" \
  -d '{"job": "team-a/app", "count": 5, "trigger": "timer:demo", "wait": true}' >/dev/null
for _ in $(seq 1 100); do
  [ "$("$VARROA" builds team-a -n team-a -o json | python3 -c 'import json,sys; print(sum(1 for b in json.load(sys.stdin)["items"] if b.get("result")))')" = 5 ] && break
  sleep 0.1
done
"$VARROA" builds team-a -n team-a
echo
"$VARROA" build team-a team-a/app 5 -n team-a
echo
echo "== The console log of team-a/app #5, from the log store (varroa logs)"
"$VARROA" logs team-a team-a/app 5 -n team-a
echo
echo "== Activity of team-a's controllers (varroa activity)"
"$VARROA" activity -n team-a --since 1h | tail -n 8

echo
echo "== Logs of everything the demo started, in $DEMO_DIR:"
for f in "$DEMO_DIR"/*.log; do echo "   $f"; done
echo "   (and the console logs of the builds, in $DEMO_DIR/logs)"
echo
if [ "${DEMO_EXIT_AFTER_SETUP:-}" = "1" ]; then
  echo "DEMO_EXIT_AFTER_SETUP=1: stopping everything now. Without it, the demo keeps running until"
  echo "Ctrl-C, and these work in another terminal:"
else
  echo "The cluster and the operators keep running until Ctrl-C. In another terminal:"
fi
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
echo "  kubectl logs -n team-a sandbox-0 -c mite        # the mite: its stream, what it applied"
echo "  export VARROA_DATABASE_URL=$VARROA_DATABASE_URL VARROA_LOG_STORE=$VARROA_LOG_STORE"
echo "  varroa builds team-a -n team-a                  # build records, from PostgreSQL"
echo "  varroa logs team-a team-a/app 5 -n team-a       # a build's console log, from the log store"
echo "  curl -X POST http://$JENKINS_IP:8080/__double/builds -d '{\"job\": \"team-a/app\", \"count\": 3}'"
echo "                                                  # more builds (the Jenkins double's admin endpoint)"
echo "  varroa activity -n team-a --since 1h            # what happened to team-a's controllers"
if [ "${DEMO_EXIT_AFTER_SETUP:-}" = "1" ]; then
  exit 0
fi
wait "${pids[0]}"
