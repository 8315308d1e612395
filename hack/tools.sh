#!/usr/bin/env bash
# Builds the servers kvlive's integration tests run, kubectl (for
# `kubectl apply --dry-run=server -k` of deploy/'s overlays), the linter and
# rulecheck (deploy/monitoring's rules through Prometheus's rule parser)
# and otlp-receiver (the OpenTelemetry Collector's OTLP receiver, which the
# trace tests export to), into .bin/ at the repository root, from the versions pinned in tools/go.mod
# and the other tools modules. Needs only Go; modules come through the Go
# module proxy.
#
#   hack/tools.sh                   build whatever is missing or outdated
#   hack/tools.sh nats-server       build only the named tools
#   hack/tools.sh virt-controller   KubeVirt's virt-controller and its CRDs
#   hack/tools.sh rulecheck prometheus-operator-crds   deploy/monitoring's checkers
#
# A tool is rebuilt only when its stamp (.bin/.stamp-<name>) no longer matches
# the pinned module version, the tools module's go.mod and the Go version, so
# a rerun is instant. Built binaries are also kept in a cache outside the
# clone, keyed by that stamp ($KVLIVE_TOOLS_CACHE, default
# ~/.cache/kvlive/tools), so a later clean clone on the same machine copies
# them instead of building. Builds run side by side, KVLIVE_TOOLS_JOBS at
# once (default: one a core), longest first; docs/testing.md gives what each
# costs cold.
#
# virt-controller (KubeVirt v1.9.0) builds from, in this order: a KubeVirt
# v1.9.0 source tree (which vendors its dependencies) named by
# KUBEVIRT_SOURCE; an xz tar of one (`git archive v1.9.0`) named by
# KUBEVIRT_SOURCE_TARBALL, checked against the sha256 pinned below and
# unpacked once into the cache; or tools/kubevirt's module, where the module
# proxy serves all of KubeVirt's dependencies. A tarball whose checksum differs
# is an error. Otherwise, when no route works, tools.sh says why, writes the
# reason to .bin/virt-controller.skipped for the tests to print, and carries
# on, unless CI=true: there a virt-controller that cannot be built fails the
# run, so a green CI means the real-KubeVirt tests ran.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/.bin"
cache="${KVLIVE_TOOLS_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/kvlive/tools}"

# name | tools module dir | module that pins the version | package | extra ldflags
tools=(
  "kube-apiserver|tools|k8s.io/kubernetes|k8s.io/kubernetes/cmd/kube-apiserver|k8s"
  "kubectl|tools|k8s.io/kubernetes|k8s.io/kubernetes/cmd/kubectl|k8s"
  "etcd|tools|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3|"
  "nats-server|tools|github.com/nats-io/nats-server/v2|github.com/nats-io/nats-server/v2|"
  "golangci-lint|tools/lint|github.com/golangci/golangci-lint/v2|github.com/golangci/golangci-lint/v2/cmd/golangci-lint|"
  "otlp-receiver|tools/otlp|go.opentelemetry.io/collector/receiver/otlpreceiver|./otlpreceiver|"
  "rulecheck|tools/prometheus|github.com/prometheus/prometheus|./rulecheck|"
  "virt-controller|tools/kubevirt|kubevirt.io/kubevirt||kubevirt"
)

# The Prometheus Operator release whose CRDs (PrometheusRule, ServiceMonitor)
# deploy/monitoring is checked against with a server dry run: the newest the
# module proxy here serves of its root module, whose example/ holds them.
prometheus_operator="github.com/prometheus-operator/prometheus-operator@v0.88.1"

# fetch_prometheus_operator_crds copies those CRDs into
# .bin/prometheus-operator-crds/, through the module proxy (checksummed
# like any module).
fetch_prometheus_operator_crds() {
  local out="${bin}/prometheus-operator-crds" dir
  if [[ -f "${out}/.version" && "$(cat "${out}/.version")" == "$prometheus_operator" ]]; then
    echo "prometheus-operator CRDs: up to date (${prometheus_operator})"
    return
  fi
  dir="$(cd "${root}/tools/prometheus" && go mod download -json "$prometheus_operator" | awk -F'"' '$2 == "Dir" { print $4 }')"
  mkdir -p "$out"
  for crd in prometheusrules servicemonitors; do
    cp -f "${dir}/example/prometheus-operator-crd/monitoring.coreos.com_${crd}.yaml" "${out}/"
  done
  chmod u+w "${out}"/*.yaml
  echo "$prometheus_operator" >"${out}/.version"
  echo "prometheus-operator CRDs: ${prometheus_operator}"
}

# kubevirt_modules_sum is the sha256 of vendor/modules.txt in KubeVirt v1.9.0:
# a KUBEVIRT_SOURCE whose vendored modules differ is not that release.
kubevirt_modules_sum="d5d514dab76ca020fe6db114fb639b9e93802f4111fa981579edefbe756ad05a"

# kubevirt_tarball_sum is the sha256 of `git archive v1.9.0` of
# github.com/kubevirt/kubevirt (commit 79d34c1762169e5b0370ec491cef5ca12e6b504c),
# xz-compressed: the one KUBEVIRT_SOURCE_TARBALL is accepted as.
kubevirt_tarball_sum="e17820b0ca0efd2dd7b96f8581fc9d770726144376e610ee6404134d17c3e762"

# kubevirt_tarball_check prints why the file named is not the pinned
# tarball and returns 1, or returns 0 when it is.
kubevirt_tarball_check() {
  local tarball="$1" sum
  if [[ ! -f "$tarball" ]]; then
    echo "KUBEVIRT_SOURCE_TARBALL=${tarball}: no such file"
    return 1
  fi
  sum="$(sha256sum "$tarball" | cut -d' ' -f1)"
  if [[ "$sum" != "$kubevirt_tarball_sum" ]]; then
    echo "KUBEVIRT_SOURCE_TARBALL=${tarball} is not KubeVirt v1.9.0's source: its sha256 is ${sum}, want ${kubevirt_tarball_sum}"
    return 1
  fi
}

# kubevirt_tarball_source checks KUBEVIRT_SOURCE_TARBALL's checksum and
# prints the folder in the cache it is unpacked into, unpacking it there
# first if no earlier run did. It unpacks into a temporary folder beside the
# target and renames it, so an interrupted or failed unpack leaves nothing
# that looks complete. On a wrong file it prints the reason and returns 1.
kubevirt_tarball_source() {
  local tarball="$1" dir tmp
  kubevirt_tarball_check "$tarball" || return 1
  dir="${cache}/kubevirt-src-${kubevirt_tarball_sum:0:16}"
  if [[ ! -f "${dir}/go.mod" ]]; then
    tmp="$(mktemp -d "${cache}/.kubevirt-src-XXXXXX")"
    echo "virt-controller: unpacking ${tarball} into ${dir} ..." >&2
    if ! tar -xJf "$tarball" -C "$tmp" 2>"${tmp}.log"; then
      echo "KUBEVIRT_SOURCE_TARBALL=${tarball} did not unpack: $(tail -3 "${tmp}.log")"
      rm -rf "$tmp" "${tmp}.log"
      return 1
    fi
    rm -rf "$dir" "${tmp}.log"
    mv "$tmp" "$dir"
  fi
  echo "$dir"
}

# k8s_ldflags stamps the Kubernetes version into kube-apiserver, which
# otherwise reports v0.0.0-master to clients.
k8s_ldflags() {
  local v="$1" minor
  minor="$(echo "${v#v}" | cut -d. -f2)"
  echo "-X k8s.io/component-base/version.gitVersion=${v} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
}

kubevirt_ldflags() {
  echo "-X kubevirt.io/client-go/version.gitVersion=$1 -X kubevirt.io/client-go/version.gitTreeState=clean"
}

wanted() {
  local name="$1"
  shift
  [[ $# -eq 0 ]] && return 0
  local w
  for w in "$@"; do [[ "$w" == "$name" ]] && return 0; done
  return 1
}

# install copies a cached build into .bin/ and records its stamp.
install() {
  local name="$1" from="$2" stamp="$3"
  cp -f "$from" "${bin}/.${name}.tmp"
  mv -f "${bin}/.${name}.tmp" "${bin}/${name}"
  echo "$stamp" >"${bin}/.stamp-${name}"
}

# build_virt_controller builds virt-controller and the KubeVirt CRDs into the
# cache as $1 and $2, from KUBEVIRT_SOURCE or else from tools/kubevirt's
# module. On failure it prints the reason and returns 1.
build_virt_controller() {
  local out="$1" crds="$2" version="$3" log src=""
  log="$(mktemp)"
  if [[ -n "${KUBEVIRT_SOURCE:-}" ]]; then
    src="${KUBEVIRT_SOURCE%/}"
  elif [[ -n "${KUBEVIRT_SOURCE_TARBALL:-}" ]]; then
    src="$(kubevirt_tarball_source "$KUBEVIRT_SOURCE_TARBALL")" || { echo "$src"; return 1; }
  fi
  if [[ -n "$src" ]]; then
    if [[ ! -f "${src}/go.mod" ]] || ! head -1 "${src}/go.mod" | grep -q '^module kubevirt.io/kubevirt$'; then
      echo "${src} is not a KubeVirt source tree (no go.mod for kubevirt.io/kubevirt)"
      return 1
    fi
    if [[ ! -f "${src}/vendor/modules.txt" ]] || [[ "$(sha256sum "${src}/vendor/modules.txt" | cut -d' ' -f1)" != "$kubevirt_modules_sum" ]]; then
      echo "${src} is not KubeVirt ${version}: its vendor/modules.txt differs from that release's"
      return 1
    fi
    # The CRD generator is kvlive's, laid into the tree through an overlay so
    # the tree is never written to; it builds against the tree's vendor/.
    local overlay
    overlay="$(mktemp)"
    printf '{"Replace":{"%s":"%s"}}\n' "${src}/kvlive-kubevirt-crds/main.go" "${root}/tools/kubevirt/kubevirt-crds/main.go" >"$overlay"
    echo "virt-controller: building from the source tree ${src} (vendor/) ..." >&2
    if ! (cd "$src" && GOTOOLCHAIN=local GOFLAGS=-mod=vendor CGO_ENABLED=0 \
      go build -ldflags "$(kubevirt_ldflags "$version")" -o "${out}.tmp" ./cmd/virt-controller &&
      GOTOOLCHAIN=local GOFLAGS=-mod=vendor CGO_ENABLED=0 \
        go build -overlay "$overlay" -o "${crds}.gen" ./kvlive-kubevirt-crds) >"$log" 2>&1; then
      echo "building from the source tree ${src} failed: $(tail -5 "$log")"
      return 1
    fi
  else
    echo "virt-controller: building kubevirt.io/kubevirt@${version} through the module proxy (set KUBEVIRT_SOURCE or KUBEVIRT_SOURCE_TARBALL to build from a source tree) ..." >&2
    # go.sum cannot be tidied where the proxy lacks KubeVirt's modules, so
    # the build may add checksums (verified against the checksum database):
    # it runs on a copy of the module, never writing to the clone.
    local mod
    mod="$(mktemp -d)"
    cp -r "${root}/tools/kubevirt/." "$mod"
    if ! (cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod \
      go build -ldflags "$(kubevirt_ldflags "$version")" -o "${out}.tmp" kubevirt.io/kubevirt/cmd/virt-controller &&
      CGO_ENABLED=0 GOFLAGS=-mod=mod go build -o "${crds}.gen" ./kubevirt-crds) >"$log" 2>&1; then
      rm -rf "$mod"
      local refused
      refused="$(grep -o 'kubevirt.io/virt-template-[a-z-]*@[^:]*' "$log" | sort -u | head -3 | tr '\n' ' ')"
      if [[ -n "$refused" ]]; then
        echo "the module proxy ($(go env GOPROXY)) does not serve ${refused}which KubeVirt ${version} requires; set KUBEVIRT_SOURCE to a KubeVirt ${version} source tree (e.g. an export of github.com/kubevirt/kubevirt at tag ${version}), or KUBEVIRT_SOURCE_TARBALL to an xz tar of one, to build from its vendor/"
      else
        echo "building kubevirt.io/kubevirt@${version} through the module proxy failed: $(tail -5 "$log")"
      fi
      return 1
    fi
    rm -rf "$mod"
  fi
  "${crds}.gen" >"${crds}.tmp"
  rm -f "${crds}.gen" "$log"
  mv -f "${out}.tmp" "$out"
  mv -f "${crds}.tmp" "$crds"
}

# entry_of prints the tools entry of the tool named.
entry_of() {
  local entry
  for entry in "${tools[@]}"; do
    [[ "${entry%%|*}" == "$1" ]] && { echo "$entry"; return; }
  done
}

# build_tool puts one tool into .bin/ (its tools entry is $1): nothing when
# .bin/ holds it at its stamp, a copy when the cache does, a build otherwise.
build_tool() {
  local name dir mod pkg flavour version stamp key ldflags start
  IFS='|' read -r name dir mod pkg flavour <<<"$1"

  if [[ "$flavour" == "kubevirt" ]]; then
    # go list -m would load KubeVirt's whole module graph, which the proxy
    # here cannot serve; the pin is read from go.mod instead.
    version="$(awk -v m="$mod" '$1 == m { print $2; exit }' "${root}/${dir}/go.mod")"
  else
    version="$(cd "${root}/${dir}" && go list -m -f '{{.Version}}' "$mod")"
  fi
  if [[ "$flavour" == "kubevirt" && -z "${KUBEVIRT_SOURCE:-}" && -n "${KUBEVIRT_SOURCE_TARBALL:-}" ]]; then
    # A wrong tarball is an error even when a build is cached: whoever
    # named it expects it to be the one the tests are judged by.
    local bad
    if ! bad="$(kubevirt_tarball_check "$KUBEVIRT_SOURCE_TARBALL")"; then
      echo "virt-controller: ${bad}" >&2
      exit 1
    fi
  fi
  stamp="${mod}@${version} ${goversion} go.mod:$(sha256sum "${root}/${dir}/go.mod" | cut -c1-16)"
  [[ "$flavour" == "kubevirt" ]] && stamp+=" crds:$(sha256sum "${root}/tools/kubevirt/kubevirt-crds/main.go" | cut -c1-16)"
  # A tool of kvlive's own source is rebuilt when its source changes.
  [[ "$pkg" == ./* ]] && stamp+=" src:$(cat "${root}/${dir}/${pkg#./}"/*.go | sha256sum | cut -c1-16)"
  if [[ -x "${bin}/${name}" && -f "${bin}/.stamp-${name}" && "$(cat "${bin}/.stamp-${name}")" == "$stamp" ]]; then
    echo "${name}: up to date (${mod}@${version})"
    return 0
  fi
  key="$(echo "$stamp" | sha256sum | cut -c1-16)"

  if [[ "$flavour" == "kubevirt" ]]; then
    rm -f "${bin}/virt-controller.skipped"
    if [[ ! -x "${cache}/${name}-${key}" || ! -s "${cache}/kubevirt-crds-${key}.yaml" ]]; then
      start=$SECONDS
      local why
      if ! why="$(build_virt_controller "${cache}/${name}-${key}" "${cache}/kubevirt-crds-${key}.yaml" "$version")"; then
        echo "virt-controller: NOT BUILT: ${why##*$'\n'}" >&2
        if [[ "${CI:-}" == "true" ]]; then
          echo "virt-controller: CI=true, where the real-KubeVirt tests must run: failing" >&2
          exit 1
        fi
        echo "virt-controller: the tests that run KubeVirt's real virt-controller will be skipped" >&2
        echo "${why##*$'\n'}" >"${bin}/virt-controller.skipped"
        rm -f "${bin}/${name}" "${bin}/.stamp-${name}"
        return 0
      fi
      echo "virt-controller: built in $((SECONDS - start))s"
    fi
    cp -f "${cache}/kubevirt-crds-${key}.yaml" "${bin}/kubevirt-crds.yaml"
    install "$name" "${cache}/${name}-${key}" "$stamp"
    echo "${name}: installed ${mod}@${version} and .bin/kubevirt-crds.yaml"
    return 0
  fi

  if [[ -x "${cache}/${name}-${key}" ]]; then
    install "$name" "${cache}/${name}-${key}" "$stamp"
    echo "${name}: from the cache (${mod}@${version})"
    return 0
  fi
  # No symbol table or DWARF: nothing debugs these binaries, and leaving
  # them out shortens the links of the large ones.
  ldflags="-s -w"
  [[ "$flavour" == "k8s" ]] && ldflags+=" $(k8s_ldflags "$version")"
  echo "${name}: building ${pkg}@${version} ..."
  start=$SECONDS
  # Build next to the target and rename, so an interrupted build never
  # leaves a binary that looks current.
  (cd "${root}/${dir}" && go build -ldflags "$ldflags" -o "${cache}/.${name}-${key}.tmp" "$pkg")
  mv -f "${cache}/.${name}-${key}.tmp" "${cache}/${name}-${key}"
  install "$name" "${cache}/${name}-${key}" "$stamp"
  echo "${name}: built in $((SECONDS - start))s"
}

# jobs are the builds that may run at once, longest first; the tools of one
# job are built one after the other. kube-apiserver and kubectl share most of
# their packages, so they go in one job: run side by side, both would compile
# the same packages at once.
jobs=(
  "kube-apiserver kubectl"
  "virt-controller"
  "golangci-lint"
  "etcd nats-server rulecheck otlp-receiver"
)

main() {
  command -v go >/dev/null || { echo "tools.sh: go is not on PATH" >&2; exit 1; }
  mkdir -p "$bin" "$cache"
  goversion="$(go env GOVERSION)"

  local w entry known
  for w in "$@"; do
    known=false
    [[ "$w" == prometheus-operator-crds ]] && known=true
    for entry in "${tools[@]}"; do [[ "${entry%%|*}" == "$w" ]] && known=true; done
    $known || { echo "tools.sh: unknown tool ${w}" >&2; exit 2; }
  done

  # At most KVLIVE_TOOLS_JOBS builds at once (default: one a core); each
  # job's output is printed whole when it ends.
  local max="${KVLIVE_TOOLS_JOBS:-$(nproc)}" logs job name failed=0 done_pid rc
  local -A running=()
  logs="$(mktemp -d)"
  reap() {
    rc=0
    wait -n -p done_pid "${!running[@]}" || rc=$?
    cat "${logs}/${running[$done_pid]}.log"
    [[ $rc -eq 0 ]] || { echo "tools.sh: building ${running[$done_pid]} failed" >&2; failed=1; }
    unset "running[$done_pid]"
  }
  for job in "${jobs[@]}"; do
    local names=()
    for name in $job; do wanted "$name" "$@" && names+=("$name"); done
    [[ ${#names[@]} -gt 0 ]] || continue
    while [[ ${#running[@]} -ge $max ]]; do reap; done
    echo "tools: ${names[*]} ..."
    (for name in "${names[@]}"; do build_tool "$(entry_of "$name")"; done) >"${logs}/${names[*]}.log" 2>&1 &
    running[$!]="${names[*]}"
  done
  while [[ ${#running[@]} -gt 0 ]]; do reap; done
  rm -rf "$logs"
  [[ $failed -eq 0 ]] || exit 1
  if wanted prometheus-operator-crds "$@"; then
    fetch_prometheus_operator_crds
  fi
}

main "$@"
