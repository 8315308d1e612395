package kube

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	instancetypeapi "kubevirt.io/api/instancetype"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
)

// ResyncPeriod is how often informers replay their cache to handlers.
// Handlers in kvlive ignore resyncs, so this only bounds drift.
const ResyncPeriod = 10 * time.Minute

type listFunc[L runtime.Object] func(context.Context, metav1.ListOptions) (L, error)
type watchFunc = cache.WatchFuncWithContext

func newInformer[L runtime.Object](obj runtime.Object, list listFunc[L], w watchFunc, indexers cache.Indexers) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return list(ctx, o)
		},
		WatchFuncWithContext: w,
	}
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	indexers[cache.NamespaceIndex] = cache.MetaNamespaceIndexFunc
	return cache.NewSharedIndexInformer(lw, obj, ResyncPeriod, indexers)
}

// VMInformer watches VirtualMachines in namespace ("" for all).
func (c Clients) VMInformer(namespace string, indexers cache.Indexers) cache.SharedIndexInformer {
	vms := c.Virt.KubevirtV1().VirtualMachines(namespace)
	return newInformer(&virtv1.VirtualMachine{}, vms.List, vms.Watch, indexers)
}

// VMIInformer watches VirtualMachineInstances in namespace ("" for all).
func (c Clients) VMIInformer(namespace string) cache.SharedIndexInformer {
	vmis := c.Virt.KubevirtV1().VirtualMachineInstances(namespace)
	return newInformer(&virtv1.VirtualMachineInstance{}, vmis.List, vmis.Watch, nil)
}

// KubeVirtInformer watches KubeVirt CRs in every namespace.
func (c Clients) KubeVirtInformer() cache.SharedIndexInformer {
	kvs := c.Virt.KubevirtV1().KubeVirts(metav1.NamespaceAll)
	return newInformer(&virtv1.KubeVirt{}, kvs.List, kvs.Watch, nil)
}

// RevisionInformer watches the ControllerRevisions KubeVirt stores
// instancetype and preference snapshots in (those carrying the object-kind label).
func (c Clients) RevisionInformer(namespace string) cache.SharedIndexInformer {
	crs := c.Kube.AppsV1().ControllerRevisions(namespace)
	selected := func(o metav1.ListOptions) metav1.ListOptions {
		o.LabelSelector = instancetypeapi.ControllerRevisionObjectKindLabel
		return o
	}
	return newInformer(&appsv1.ControllerRevision{},
		func(ctx context.Context, o metav1.ListOptions) (*appsv1.ControllerRevisionList, error) {
			return crs.List(ctx, selected(o))
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return crs.Watch(ctx, selected(o))
		}, nil)
}

// ObjectInformers are informers over the four instancetype.kubevirt.io kinds,
// keyed by Kind.
type ObjectInformers map[string]cache.SharedIndexInformer

// NewObjectInformers builds informers on all four instancetype and
// preference kinds; namespaced kinds are watched in namespace ("" for all).
func (c Clients) NewObjectInformers(namespace string) ObjectInformers {
	it := c.Virt.InstancetypeV1beta1()
	its, cits := it.VirtualMachineInstancetypes(namespace), it.VirtualMachineClusterInstancetypes()
	prefs, cprefs := it.VirtualMachinePreferences(namespace), it.VirtualMachineClusterPreferences()
	return ObjectInformers{
		events.KindInstancetype:        newInformer(&v1beta1.VirtualMachineInstancetype{}, its.List, its.Watch, nil),
		events.KindClusterInstancetype: newInformer(&v1beta1.VirtualMachineClusterInstancetype{}, cits.List, cits.Watch, nil),
		events.KindPreference:          newInformer(&v1beta1.VirtualMachinePreference{}, prefs.List, prefs.Watch, nil),
		events.KindClusterPreference:   newInformer(&v1beta1.VirtualMachineClusterPreference{}, cprefs.List, cprefs.Watch, nil),
	}
}

// Run starts every informer; they stop when ctx ends.
func (o ObjectInformers) Run(ctx context.Context) {
	for _, inf := range o {
		go inf.RunWithContext(ctx)
	}
}

// HasSynced reports whether every informer has listed once.
func (o ObjectInformers) HasSynced() bool {
	for _, inf := range o {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}
