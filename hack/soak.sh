#!/usr/bin/env bash
# Runs kvlive's fault soak (./soak) over many seeds, in chunks, and prints
# each failing seed's report (with the command that replays it) and a
# summary. CI runs only the soak's fixed seeds, in the unit tests.
#
#   hack/soak.sh            1,000 seeds from 1
#   hack/soak.sh 200 5000   200 seeds from 5000
set -euo pipefail
cd "$(dirname "$0")/.."
count="${1:-1000}"
first="${2:-1}"
chunk=25
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go test -c -o "${bin}/soak.test" ./soak
failed=0
started=$SECONDS
for ((from = first; from < first + count; from += chunk)); do
  n=$((first + count - from < chunk ? first + count - from : chunk))
  if ! (cd soak && "${bin}/soak.test" -test.run '^TestSoak$' -test.timeout 60m -soak.first "$from" -soak.seeds "$n" >"${bin}/out" 2>&1); then
    grep -v 'leaderelection.go' "${bin}/out" | grep -A400 -E 'broke|^panic' || tail -40 "${bin}/out"
    failed=$((failed + $(grep -c -E '^\s+--- FAIL: TestSoak/seed-' "${bin}/out" || true)))
  fi
  echo "soak: seeds ${first}..$((from + n - 1)) run, ${failed} failed, $((SECONDS - started))s"
done
[[ $failed -eq 0 ]]
