// Package inmemory runs kvlive's clients over an in-memory cluster (the
// client-go and KubeVirt fake clientsets): what kvlive demo runs on, and
// what unit tests use. It lives apart from package kube so that the stages,
// which only ever talk to a real API server, do not link the fake
// clientsets. Its watches have unbounded buffers, as an API server's
// clients may lag: the fake clientsets' own hold 100 events and then panic.
package inmemory

import (
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	virtfake "kubevirt.io/client-go/kubevirt/fake"

	"kvlive/internal/kube"
)

// New returns clients over an in-memory cluster (the client-go and
// KubeVirt fake clientsets) holding kubeObjs and virtObjs: what the demo
// runs on, and what unit tests use.
func New(kubeObjs []runtime.Object, virtObjs ...runtime.Object) kube.Clients {
	k, v := k8sfake.NewClientset(kubeObjs...), virtfake.NewSimpleClientset(virtObjs...)
	serveWatches(k)
	serveWatches(v)
	return kube.Clients{Kube: k, Virt: v}
}
