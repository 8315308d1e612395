package kube

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
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

func newInformer[L runtime.Object](obj runtime.Object, list listFunc[L], w cache.WatchFuncWithContext, resync time.Duration) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return list(ctx, o)
		},
		WatchFuncWithContext: w,
	}
	// No namespace index: only the VMs are listed by namespace (newCache
	// adds it there), and each index costs an entry per object.
	return cache.NewSharedIndexInformer(lw, obj, resync, cache.Indexers{})
}

// informerFor registers, once per type, an informer with the shared factory,
// so every stage in one process shares one list and one watch per kind.
// KubeVirt's client-go ships no generated informers; the factory's
// InformerFor takes any.
func informerFor[L runtime.Object](f informers.SharedInformerFactory, obj runtime.Object, list listFunc[L], w cache.WatchFuncWithContext) cache.SharedIndexInformer {
	return f.InformerFor(obj, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return newInformer(obj, list, w, resync)
	})
}

func vmInformer(f informers.SharedInformerFactory, c Clients, namespace string) cache.SharedIndexInformer {
	vms := c.Virt.KubevirtV1().VirtualMachines(namespace)
	return informerFor(f, &virtv1.VirtualMachine{}, vms.List, vms.Watch)
}

func vmiInformer(f informers.SharedInformerFactory, c Clients, namespace string) cache.SharedIndexInformer {
	vmis := c.Virt.KubevirtV1().VirtualMachineInstances(namespace)
	return informerFor(f, &virtv1.VirtualMachineInstance{}, vmis.List, vmis.Watch)
}

// kubeVirtInformer watches KubeVirt CRs in every namespace.
func kubeVirtInformer(f informers.SharedInformerFactory, c Clients) cache.SharedIndexInformer {
	kvs := c.Virt.KubevirtV1().KubeVirts(metav1.NamespaceAll)
	return informerFor(f, &virtv1.KubeVirt{}, kvs.List, kvs.Watch)
}

// revisionInformer watches the ControllerRevisions KubeVirt stores
// instancetype and preference snapshots in (those carrying the object-kind
// label), not every revision of every StatefulSet and DaemonSet.
func revisionInformer(f informers.SharedInformerFactory, c Clients, namespace string) cache.SharedIndexInformer {
	list, w := revisionListWatch(c, namespace, instancetypeapi.ControllerRevisionObjectKindLabel)
	return informerFor(f, &appsv1.ControllerRevision{}, list, w)
}

// revisionListWatch lists and watches the ControllerRevisions selector
// selects.
func revisionListWatch(c Clients, namespace, selector string) (listFunc[*appsv1.ControllerRevisionList], cache.WatchFuncWithContext) {
	crs := c.Kube.AppsV1().ControllerRevisions(namespace)
	selected := func(o metav1.ListOptions) metav1.ListOptions {
		o.LabelSelector = selector
		return o
	}
	return func(ctx context.Context, o metav1.ListOptions) (*appsv1.ControllerRevisionList, error) {
			return crs.List(ctx, selected(o))
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return crs.Watch(ctx, selected(o))
		}
}

// revisionsOf is the selector of the instancetype revisions of the objects
// named names (of any kind: a name shared by an instance type and a
// preference selects both) and, when generations is not empty, of those
// generations only (of any of the objects); of every object, or every
// generation, when its list cannot be put in one selector.
func revisionsOf(names, generations []string) string {
	selector := instancetypeapi.ControllerRevisionObjectKindLabel
	if len(names) == 0 || len(names) > maxSelectedObjects {
		return selector
	}
	// A name or generation no label value can hold: no revision carries
	// it either way, and without that requirement more is selected, never
	// less.
	req, err := labels.NewRequirement(instancetypeapi.ControllerRevisionObjectNameLabel, selection.In, names)
	if err != nil {
		return selector
	}
	selector += "," + req.String()
	if len(generations) == 0 || len(generations) > maxSelectedObjects {
		return selector
	}
	if req, err = labels.NewRequirement(instancetypeapi.ControllerRevisionObjectGenerationLabel, selection.In, generations); err == nil {
		selector += "," + req.String()
	}
	return selector
}

// generationsOf is the generations the pinned revisions (namespace/name
// keys) name, as KubeVirt names them (`<vm>-<object>-<version>-<uid>-<generation>`,
// pkg/instancetype/revision): the number after the last dash. nil when a
// name does not end in one, so nothing is narrowed by a guess; a revision
// whose generation label disagrees with its name is read by pinsMissed.
func generationsOf(pins []string) []string {
	seen := map[string]bool{}
	for _, key := range pins {
		g := key[strings.LastIndexByte(key, '-')+1:]
		if n, err := strconv.ParseInt(g, 10, 64); err != nil || n < 0 || strconv.FormatInt(n, 10) != g {
			return nil
		}
		seen[g] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// maxSelectedObjects bounds the names (and the generations) one revision
// selector lists; past it the selector would outgrow a request line, and
// every object's (or every generation's) revisions are read.
const maxSelectedObjects = 200

// ObjectInformers are informers over the four instancetype.kubevirt.io kinds,
// keyed by Kind.
type ObjectInformers map[string]cache.SharedIndexInformer

func objectInformers(f informers.SharedInformerFactory, c Clients, namespace string) ObjectInformers {
	it := c.Virt.InstancetypeV1beta1()
	its, cits := it.VirtualMachineInstancetypes(namespace), it.VirtualMachineClusterInstancetypes()
	prefs, cprefs := it.VirtualMachinePreferences(namespace), it.VirtualMachineClusterPreferences()
	return ObjectInformers{
		events.KindInstancetype:        informerFor(f, &v1beta1.VirtualMachineInstancetype{}, its.List, its.Watch),
		events.KindClusterInstancetype: informerFor(f, &v1beta1.VirtualMachineClusterInstancetype{}, cits.List, cits.Watch),
		events.KindPreference:          informerFor(f, &v1beta1.VirtualMachinePreference{}, prefs.List, prefs.Watch),
		events.KindClusterPreference:   informerFor(f, &v1beta1.VirtualMachineClusterPreference{}, cprefs.List, cprefs.Watch),
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
