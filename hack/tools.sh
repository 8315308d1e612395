#!/usr/bin/env bash
# Builds the servers kvlive's integration tests run, and the linter, into
# .bin/ at the repository root, from the versions pinned in tools/go.mod and
# tools/lint/go.mod. Needs only Go; modules come through the Go module proxy.
#
#   hack/tools.sh                 build whatever is missing or outdated
#   hack/tools.sh nats-server     build only the named tools
#
# A tool is rebuilt only when its stamp (.bin/.stamp-<name>) no longer matches
# the pinned module version, the tools module's go.mod and the Go version, so
# a rerun is instant. Cold on 2 cores kube-apiserver takes about 8 minutes,
# golangci-lint about 3, jaeger about 8, etcd and nats-server about a minute each.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/.bin"

# name | tools module dir | module that pins the version | package | extra ldflags
tools=(
  "kube-apiserver|tools|k8s.io/kubernetes|k8s.io/kubernetes/cmd/kube-apiserver|k8s"
  "etcd|tools|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3|"
  "nats-server|tools|github.com/nats-io/nats-server/v2|github.com/nats-io/nats-server/v2|"
  "golangci-lint|tools/lint|github.com/golangci/golangci-lint/v2|github.com/golangci/golangci-lint/v2/cmd/golangci-lint|"
  "jaeger|tools/jaeger|github.com/jaegertracing/jaeger|github.com/jaegertracing/jaeger/cmd/jaeger|"
)

# k8s_ldflags stamps the Kubernetes version into kube-apiserver, which
# otherwise reports v0.0.0-master to clients.
k8s_ldflags() {
  local v="$1" minor
  minor="$(echo "${v#v}" | cut -d. -f2)"
  echo "-X k8s.io/component-base/version.gitVersion=${v} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
}

wanted() {
  local name="$1"
  shift
  [[ $# -eq 0 ]] && return 0
  local w
  for w in "$@"; do [[ "$w" == "$name" ]] && return 0; done
  return 1
}

main() {
  command -v go >/dev/null || { echo "tools.sh: go is not on PATH" >&2; exit 1; }
  mkdir -p "$bin"
  local goversion entry name dir mod pkg flavour version stamp ldflags start
  goversion="$(go env GOVERSION)"

  for w in "$@"; do
    local known=false
    for entry in "${tools[@]}"; do [[ "${entry%%|*}" == "$w" ]] && known=true; done
    $known || { echo "tools.sh: unknown tool ${w}" >&2; exit 2; }
  done

  for entry in "${tools[@]}"; do
    IFS='|' read -r name dir mod pkg flavour <<<"$entry"
    wanted "$name" "$@" || continue

    version="$(cd "${root}/${dir}" && go list -m -f '{{.Version}}' "$mod")"
    stamp="${mod}@${version} ${goversion} go.mod:$(sha256sum "${root}/${dir}/go.mod" | cut -c1-16)"
    if [[ -x "${bin}/${name}" && -f "${bin}/.stamp-${name}" && "$(cat "${bin}/.stamp-${name}")" == "$stamp" ]]; then
      echo "${name}: up to date (${mod}@${version})"
      continue
    fi

    ldflags=""
    [[ "$flavour" == "k8s" ]] && ldflags="$(k8s_ldflags "$version")"
    echo "${name}: building ${pkg}@${version} into .bin/${name} ..."
    start=$SECONDS
    # Build next to the target and rename, so an interrupted build never
    # leaves a binary that looks current.
    (cd "${root}/${dir}" && go build -ldflags "$ldflags" -o "${bin}/.${name}.tmp" "$pkg")
    mv -f "${bin}/.${name}.tmp" "${bin}/${name}"
    echo "$stamp" >"${bin}/.stamp-${name}"
    echo "${name}: built in $((SECONDS - start))s"
  done
}

main "$@"
