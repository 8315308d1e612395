#!/usr/bin/env bash
# The bench command: starts the same real servers as the integration tests
# (kube-apiserver + etcd, nats-server, the virt-controller stand-in) and
# prints one table of figures, each with its aim where it has one and
# whether this run met it, all measured in this one run.
#
#   hack/bench.sh                      the default sections (about 10 minutes on 2 cores,
#                                      tools cached): stopped VMs with nothing reacting,
#                                      kvlive against a raw loop at 1,000 VMs (two runs) and
#                                      10,000 (one), the API server and etcd pinned to CPU 0
#                                      and the rest to CPU 1 as deployed; and plans through
#                                      each kind of NATS
#   hack/bench.sh -bench.control-plane-cpus 0-3 -bench.client-cpus 4-7
#                                      the same shape on a machine with more cores (empty
#                                      lists: nothing pinned, every process sharing the cores)
#   hack/bench.sh -bench.sections stopped -bench.stopped 100000 -bench.runs 1
#                                      the large fleet (about an hour, memory above all)
#   hack/bench.sh -bench.sections memory -bench.memory 100000 -bench.memory-stopped 20000
#                                      kvlive run's memory against its aims (~30 minutes, ~18 GB)
#   hack/bench.sh -bench.sections apply,planner
#                                      the stand-in reacting, kubectl, latency, the store, the planner
#   hack/bench.sh -bench.stopped 1000 -bench.runs 4   a quicker run, with more runs
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

