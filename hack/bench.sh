#!/usr/bin/env bash
# The bench command: starts the same real servers as the integration tests
# (kube-apiserver + etcd, nats-server, the virt-controller stand-in) and
# prints one table of figures and ratios, all measured in this one run:
# apply throughput against a raw client-go loop and a kubectl loop (each
# run started on a quiet cluster, and also timed to KubeVirt's reaction
# done), what the API server served per VM, edit-to-write latency, planner
# scale, kvlive run's memory, the per-event commands on a full store, and
# plans per second through each kind of NATS.
#
#   hack/bench.sh                              the defaults (about 6 minutes on 2 cores here)
#   hack/bench.sh -bench.memory 10000,100000   add a 100,000-VM fleet (20 minutes more, ~18 GB)
#   hack/bench.sh -bench.vms 500               a quicker, smaller run
#   hack/bench.sh -bench.sections latency      only edit-to-write latency (about a minute)
#
# Flags after the script go to the bench (see integration/bench_test.go).
# Benchmarks print figures; they never fail on a number. The unit
# benchmarks stay runnable alone: go test -run '^$' -bench . ./planner/
set -euo pipefail
cd "$(dirname "$0")/.."

./hack/tools.sh kube-apiserver etcd nats-server kubectl >&2
log="$(mktemp)"
if ! go test -count=1 -tags 'integration bench' -run '^TestBench$' -timeout 120m -v ./integration/ -args "$@" >"$log" 2>&1; then
  tail -100 "$log" >&2
  echo "bench: failed; full output in $log" >&2
  exit 1
fi
sed -n '/^=== kvlive bench/,/^=== end/p' "$log"
echo "bench: full output (with each rollout's request-to-first and steady rates and a trace) in $log" >&2

