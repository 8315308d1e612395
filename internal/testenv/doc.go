// Package testenv is where kvlive's test helpers live. For unit tests: an
// embedded JetStream server per test, in-memory clusters, a started informer
// cache, fixture builders for instance types, preferences, VMs, VMIs and
// pinned revisions, one Eventually, and goleak for TestMain. For the
// integration tests (build tag integration) it starts real servers: a
// kube-apiserver and etcd with KubeVirt's CRDs installed (through
// controller-runtime's envtest), and nats-server processes, alone or as a
// JetStream cluster.
//
// The binaries are built from pinned Go modules by hack/tools.sh into .bin/
// at the repository root; nothing is downloaded at test time. Every helper
// stops what it started through t.Cleanup.
package testenv
