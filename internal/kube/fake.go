package kube

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	virtfake "kubevirt.io/client-go/kubevirt/fake"
)

// deepWatchBuffers sets the watch buffer size once, before any in-memory
// watcher reads it.
var deepWatchBuffers sync.Once

// NewInMemory returns clients over an in-memory cluster (the client-go and
// KubeVirt fake clientsets) holding kubeObjs and virtObjs: what the demo and
// offline planning run on, and what unit tests use.
func NewInMemory(kubeObjs []runtime.Object, virtObjs ...runtime.Object) Clients {
	// The fake clientsets' watchers panic once 100 events are unread
	// (apimachinery's watch.DefaultChanSize). A rollout writes faster than
	// an informer drains on a busy machine, so in-memory clusters get deep
	// buffers; nothing in kvlive watches a real cluster through this package
	// variable.
	deepWatchBuffers.Do(func() { watch.DefaultChanSize = 1 << 20 })
	return Clients{Kube: k8sfake.NewClientset(kubeObjs...), Virt: virtfake.NewSimpleClientset(virtObjs...)}
}
