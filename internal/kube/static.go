package kube

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	instancetypeapi "kubevirt.io/api/instancetype"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
)

// CacheOf returns a Cache over objs alone, for planning over a file (plan
// --offline): its informers' indexers are filled from objs, nothing is
// listed or watched and no client is made. Start revisions are read from
// the ControllerRevisions among objs. objs are kept, not copied. It is never
// started: Start, WaitForSync and Shutdown are NewCache's.
func CacheOf(objs ...runtime.Object) (*Cache, error) {
	static := func(obj runtime.Object) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(&cache.ListWatch{}, obj, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	ca := &Cache{
		static:    true,
		vms:       static(&virtv1.VirtualMachine{}),
		vmis:      static(&virtv1.VirtualMachineInstance{}),
		kubevirts: static(&virtv1.KubeVirt{}),
		revisions: static(&appsv1.ControllerRevision{}),
		objects: ObjectInformers{
			events.KindInstancetype:        static(&v1beta1.VirtualMachineInstancetype{}),
			events.KindClusterInstancetype: static(&v1beta1.VirtualMachineClusterInstancetype{}),
			events.KindPreference:          static(&v1beta1.VirtualMachinePreference{}),
			events.KindClusterPreference:   static(&v1beta1.VirtualMachineClusterPreference{}),
		},
	}
	if err := ca.vms.AddIndexers(cache.Indexers{RefIndex: indexRefs}); err != nil {
		return nil, fmt.Errorf("kube: VM index: %w", err)
	}
	if err := ca.revisions.AddIndexers(cache.Indexers{OwnerIndex: indexOwner}); err != nil {
		return nil, fmt.Errorf("kube: revision index: %w", err)
	}
	all := map[string]*appsv1.ControllerRevision{}
	for _, obj := range objs {
		var into cache.SharedIndexInformer
		switch o := obj.(type) {
		case *virtv1.VirtualMachine:
			into = ca.vms
		case *virtv1.VirtualMachineInstance:
			into = ca.vmis
		case *virtv1.KubeVirt:
			into = ca.kubevirts
		case *appsv1.ControllerRevision:
			all[o.Namespace+"/"+o.Name] = o
			if _, ok := o.Labels[instancetypeapi.ControllerRevisionObjectKindLabel]; ok {
				into = ca.revisions // as the revision informer selects them
			}
		case *v1beta1.VirtualMachineInstancetype:
			into = ca.objects[events.KindInstancetype]
		case *v1beta1.VirtualMachineClusterInstancetype:
			into = ca.objects[events.KindClusterInstancetype]
		case *v1beta1.VirtualMachinePreference:
			into = ca.objects[events.KindPreference]
		case *v1beta1.VirtualMachineClusterPreference:
			into = ca.objects[events.KindClusterPreference]
		default:
			return nil, fmt.Errorf("kube: a cache holds no %T", obj)
		}
		if into == nil {
			continue
		}
		if err := into.GetIndexer().Add(obj); err != nil {
			return nil, fmt.Errorf("kube: %w", err)
		}
	}
	ca.readRevision = func(_ context.Context, namespace, name string) (*appsv1.ControllerRevision, error) {
		if cr, ok := all[namespace+"/"+name]; ok {
			return cr, nil
		}
		return nil, apierrors.NewNotFound(appsv1.Resource("controllerrevisions"), name)
	}
	return ca, nil
}
