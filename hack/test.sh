#!/usr/bin/env bash
# The test command: everything CI runs, on a fresh clone with only Go installed.
#
#   1. in the background, while the checks below that need none of them
#      run: builds kube-apiserver, etcd, nats-server, kubectl, otlp-receiver,
#      golangci-lint, rulecheck and KubeVirt's virt-controller into .bin/
#      (hack/tools.sh, two at once, the four that share kvlive's
#      dependencies once vet has compiled them; copied from
#      ~/.cache/kvlive/tools when built before at the pinned versions),
#      and installs Debian's chromium
#      for the dashboard's browser tests where it is missing
#      (hack/chromium.sh);
#   2. gofmt, go vet (every file: the integration and bench tags too),
#      go mod tidy;
#   3. unit tests with the race detector (fake clientsets, embedded NATS),
#      the fault soak's fixed seeds (soak/) among them;
#   4. golangci-lint, deploy/monitoring's rules through Prometheus's rule
#      parser (rulecheck), once the tools are there;
#   5. integration tests (build tag `integration`) on a real kube-apiserver +
#      etcd, real nats-server processes and the kvlive binary, and KubeVirt
#      v1.9.0's own virt-controller where hack/tools.sh could build it (set
#      KUBEVIRT_SOURCE to a KubeVirt v1.9.0 source tree, or
#      KUBEVIRT_SOURCE_TARBALL to an xz tar of one; .ci/run does): by area,
#      two areas at once (integration/AREAS, hack/testareas), each within
#      its budget;
#   6. a summary: each step's time, and how many real-KubeVirt tests ran
#      (under CI=true, none is a failure).
#
# KVLIVE_TEST_JOBS sets how many integration areas run at once (default 2,
# for 2 cores); KVLIVE_TEST_AREAS=a,b runs only those areas.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's time, printed at the end, and on a failure with the step that
# failed: where the time went is the first thing to know of a slow run.
steps=()
current=""
run_started=$SECONDS
step() {
  current="$1"
  step_started=$SECONDS
  echo "== $1 ($(date -u +%H:%M:%S))"
}
step_done() {
  steps+=("$(printf '  %-26s %5ds' "$current" $((SECONDS - step_started)))")
  current=""
}
finish() {
  local rc=$?
  # A tools build still running after a failed check ends with the run,
  # its go builds with it (its own process group). chromium.sh is left to
  # finish: an apt-get cut short leaves dpkg to repair.
  [[ -z "${tools_pid:-}" ]] || kill -- "-${tools_pid}" 2>/dev/null || true
  [[ -z "${tools_later_pid:-}" ]] || kill -- "-${tools_later_pid}" 2>/dev/null || true
  echo "== step times"
  [[ ${#steps[@]} -eq 0 ]] || printf '%s\n' "${steps[@]}"
  [[ -n "$current" ]] && printf '  %-26s %5ds  FAILED\n' "$current" $((SECONDS - step_started))
  printf '  %-26s %5ds\n' "in all" $((SECONDS - run_started))
  exit "$rc"
}
trap finish EXIT

work="$(mktemp -d)"

# Every build of the run but the race detector's uses the image's flags
# (Dockerfile): no cgo, -trimpath, the grpcnotrace tag. Go's build cache
# keys a compiled package by its flags, so vet, the integration tests' binary
# and the kvlive binary they start compile kvlive's dependencies once between
# them; with the defaults the kvlive binary compiled all of them again. The
# race detector needs cgo and compiles them once more in any case.
export CGO_ENABLED=0
export GOFLAGS="-trimpath${GOFLAGS:+ ${GOFLAGS}}"
image_tags="grpcnotrace"

# The tools build in the background: the checks before the lint need none
# of them, and a cold build waits on downloads and single-threaded links
# that leave a core to the checks. They build in two parts. The ones that
# share no compiled package with kvlive start now. kube-apiserver, kubectl,
# etcd and nats-server start once vet has compiled kvlive's dependencies:
# tools/go.mod pins the modules they share at kvlive's versions, so the
# build cache already holds about 880 of their packages (see
# docs/testing.md); begun beside vet, both would compile them.
started_at=$(date +%s)
tools_later="kube-apiserver kubectl etcd nats-server"
tools_now="virt-controller golangci-lint otlp-receiver rulecheck prometheus-operator-crds"
# The first part also downloads the modules the second needs (go list
# loads their packages), so those wait on no download after vet.
tools_later_pkgs="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3 github.com/nats-io/nats-server/v2"
setsid bash -c '(cd tools && go list -deps $3 >/dev/null) & downloads=$!
  ./hack/tools.sh $1 && wait $downloads && echo "tools: the first part ready $(($(date +%s) - $2))s after the run started"' \
  _ "$tools_now" "$started_at" "$tools_later_pkgs" >"${work}/tools.log" 2>&1 &
tools_pid=$!
./hack/chromium.sh >"${work}/chromium.log" 2>&1 &
chromium_pid=$!

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
step_done

step "go vet"
# One run over every file: no file of kvlive's excludes a tag, so the
# integration and bench tags add their files to the untagged ones.
go vet -tags "integration bench ${image_tags}" ./...
step_done

# The second part of the tools, now that vet has compiled what they share
# with kvlive.
setsid bash -c './hack/tools.sh $1 && echo "tools: the second part ready $(($(date +%s) - $2))s after the run started"' \
  _ "$tools_later" "$started_at" >"${work}/tools-later.log" 2>&1 &
tools_later_pid=$!

step "go mod tidy"
cp go.mod "${work}/go.mod"; cp go.sum "${work}/go.sum"
go mod tidy
if ! diff -q go.mod "${work}/go.mod" >/dev/null || ! diff -q go.sum "${work}/go.sum" >/dev/null; then
  echo "go.mod/go.sum are not tidy"; git --no-pager diff go.mod go.sum; exit 1
fi
step_done

step "tools module aligned"
# Every module kvlive compiles that the tools module also has must be at
# kvlive's version there, or the tools' builds compile it, and every
# package above it, again (see tools/go.mod).
modules='{{with .Module}}{{.Path}} {{.Version}}{{end}}'
go list -deps -test -tags "integration bench ${image_tags}" -f "$modules" ./... | LC_ALL=C sort -u >"${work}/kvlive.mods"
(cd tools && go list -deps -f "$modules" $tools_later_pkgs) | LC_ALL=C sort -u >"${work}/tools.mods"
misaligned=$(LC_ALL=C join "${work}/kvlive.mods" "${work}/tools.mods" | awk '$2 != $3 { print "  " $1 ": kvlive " $2 ", tools " $3 }')
if [ -n "$misaligned" ]; then
  echo "tools/go.mod has other versions of modules kvlive compiles (run: cd tools && go get <module>@<kvlive's version> && go mod tidy):"
  echo "$misaligned"; exit 1
fi
step_done

step "unit tests"
# As JSON, kept, so the report names what failed and where the time went;
# a package past its 10-minute timeout fails naming its test.
unit_rc=0
CGO_ENABLED=1 go test -race -tags "$image_tags" -count=1 -timeout 10m -json ./... >"${work}/unit.json" || unit_rc=$?
go run ./hack/testareas -report "${work}/unit.json" -slowest 10
[[ $unit_rc -eq 0 ]] || { echo "unit tests failed"; exit 1; }
step_done

step "tools (waited for)"
for part in tools tools-later; do
  pid_var="${part/-/_}_pid"
  tools_rc=0
  wait "${!pid_var}" || tools_rc=$?
  cat "${work}/${part}.log"
  [[ $tools_rc -eq 0 ]] || { echo "hack/tools.sh failed"; exit 1; }
done
chromium_rc=0
wait "$chromium_pid" || chromium_rc=$?
cat "${work}/chromium.log"
[[ $chromium_rc -eq 0 ]] || { echo "hack/chromium.sh failed"; exit 1; }
step_done

step "golangci-lint"
./.bin/golangci-lint run --build-tags "integration,bench,${image_tags}" ./...
step_done

step "monitoring rules"
go run ./deploy/monitoring/promrules deploy/monitoring/prometheusrule.yaml >"${work}/rules.yaml"
./.bin/rulecheck "${work}/rules.yaml"
step_done

step "integration tests"
real_log="${work}/real-kubevirt.log"
touch "$real_log"
KVLIVE_REAL_KUBEVIRT_LOG="$real_log" go run ./hack/testareas -areas integration/AREAS -tags "integration ${image_tags}" \
  -jobs "${KVLIVE_TEST_JOBS:-2}" -out "${work}/areas" ${KVLIVE_TEST_AREAS:+-only "$KVLIVE_TEST_AREAS"}
step_done

echo "== summary"
echo "all checks passed"
if [ -s "$real_log" ]; then
  echo "real KubeVirt: $(wc -l <"$real_log") tests ran against KubeVirt v1.9.0's virt-controller: $(tr '\n' ' ' <"$real_log")"
elif [ "${CI:-}" = "true" ]; then
  echo "real KubeVirt: NOT RUN under CI=true, where they must: no test ran against KubeVirt v1.9.0's virt-controller"
  exit 1
else
  why="run hack/tools.sh virt-controller"
  [ -f .bin/virt-controller.skipped ] && why="$(cat .bin/virt-controller.skipped)"
  echo "real KubeVirt: SKIPPED, the tests ran on the stand-in only; virt-controller was not built: ${why}"
fi
rm -rf "$work"
