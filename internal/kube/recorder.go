package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	kubevirtscheme "kubevirt.io/client-go/kubevirt/scheme"
)

// Component is the source kvlive's Kubernetes Events name.
const Component = "kvlive"

// NewRecorder returns a recorder of Kubernetes Events on the objects kvlive
// acts on (what kubectl describe shows under Events), sent by a broadcaster
// that aggregates repeats as kubelet's and controllers' do; stop flushes
// and ends it.
func NewRecorder(c Clients) (recorder record.EventRecorder, stop func()) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kubevirtscheme.AddToScheme(scheme))
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Kube.CoreV1().Events("")})
	return b.NewRecorder(scheme, corev1.EventSource{Component: Component}), b.Shutdown
}
