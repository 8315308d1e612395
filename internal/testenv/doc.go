// Package testenv is where kvlive's unit-test helpers live: an embedded
// JetStream server per test, in-memory clusters, a started informer cache,
// fixture builders for instance types, preferences, VMs, VMIs and pinned
// revisions, the planner benchmarks' fleet, a local receiver of notifications, a LogBuffer for a process's or a
// logger's output, one Eventually, and goleak for TestMain. Everything it
// starts runs in the test process and stops through t.Cleanup.
//
// The real servers (kube-apiserver and etcd, virt-controller, nats-server,
// OTLP receiver) are started by integration/framework. Both packages are imported
// only by _test.go files; the layering test enforces it.
package testenv
