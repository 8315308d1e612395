// Package kube is how kvlive talks to Kubernetes: the two clientsets
// (core and KubeVirt) built from a REST config, an in-memory cluster for
// the demo and offline planning, and Cache, the process's one informer
// cache over VMs, VMIs, the KubeVirt CR, instancetype ControllerRevisions
// and the four instancetype/preference kinds, built on client-go's shared
// informer factory (kubevirt.io/client-go ships no generated informers).
// The cache implements the small read interfaces the stages and the
// instancetype package declare.
package kube
