//go:build integration

// Package integration holds kvlive's end-to-end tests: the kvlive binary,
// built once per run, against a real kube-apiserver and etcd with KubeVirt's
// CRDs, a real nats-server process, and the KubeVirt stand-in
// (internal/standin) playing virt-controller in the test process.
//
// Run them with
//
//	go test -count=1 -tags integration -p 1 ./integration/...
//
// after hack/tools.sh has built the servers into .bin/.
package integration
