// Package testenv starts real servers for kvlive's integration tests: a
// kube-apiserver and etcd with KubeVirt's CRDs installed (through
// controller-runtime's envtest), and nats-server processes, alone or as a
// JetStream cluster.
//
// The binaries are built from pinned Go modules by hack/tools.sh into .bin/
// at the repository root; nothing is downloaded at test time. Every helper
// stops what it started through t.Cleanup.
package testenv
