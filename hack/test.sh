#!/usr/bin/env bash
# The test command: everything CI runs, on a fresh clone with only Go installed.
# Unit tests, vet and formatting; the integration tests on a real
# kube-apiserver + etcd and real NATS servers (their binaries are built into
# .bin/ by hack/tools.sh, and reused when present).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.bin/*'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi

echo "== go vet"
go vet ./...

echo "== unit tests"
go test -count=1 ./...
