// Package inmemory runs kvlive's clients over an in-memory cluster (the
// client-go and KubeVirt fake clientsets): what kvlive demo runs on, and
// what unit tests use. It lives apart from package
// kube so that the stages, which only ever talk to a real API server, do not
// link the fake clientsets.
package inmemory

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	virtfake "kubevirt.io/client-go/kubevirt/fake"

	"kvlive/internal/kube"
)

// deepWatchBuffers sets the watch buffer size once, before any in-memory
// watcher reads it.
var deepWatchBuffers sync.Once

// New returns clients over an in-memory cluster (the client-go and
// KubeVirt fake clientsets) holding kubeObjs and virtObjs: what the demo
// runs on, and what unit tests use.
func New(kubeObjs []runtime.Object, virtObjs ...runtime.Object) kube.Clients {
	// The fake clientsets' watchers panic once 100 events are unread
	// (apimachinery's watch.DefaultChanSize). A rollout writes faster than
	// an informer drains on a busy machine, so in-memory clusters get deep
	// buffers. The variable is apimachinery's, global: only programs that
	// run on an in-memory cluster (the demo, offline planning, tests) link
	// this package.
	deepWatchBuffers.Do(func() { watch.DefaultChanSize = 1 << 20 })
	return kube.Clients{Kube: k8sfake.NewClientset(kubeObjs...), Virt: virtfake.NewSimpleClientset(virtObjs...)}
}
