// Package framework starts the real servers kvlive's tests run against, and
// plays what those servers need but a test machine lacks. It starts a
// kube-apiserver and etcd with KubeVirt's CRDs installed (through
// controller-runtime's envtest, with or without an audit log), KubeVirt's
// own virt-controller with players standing in for the scheduler, the
// kubelet and virt-handler, nats-server processes (alone, with users, TLS or
// an operator's JWTs, or as a JetStream cluster), and an OTLP receiver.
//
// It is imported only by _test.go files: by the integration tests (build tag
// integration) and by any unit test that needs one real server. It carries
// no build tag itself so that those can import it; the layering test keeps
// it out of everything kvlive ships. Unit fixtures (embedded JetStream,
// in-memory clusters, object builders, Eventually, goleak) are in
// internal/testenv.
//
// The binaries are built from pinned Go modules by hack/tools.sh into .bin/
// at the repository root; nothing is downloaded at test time. Every helper
// stops what it started through t.Cleanup.
package framework
