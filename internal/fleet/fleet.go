package fleet

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/planner/liveplan"
)

// RefIndex is the VM informer index of referenced objects, keyed by
// events.Ref.Key: `<kind>/<namespace|_>/<name>`.
const RefIndex = "kvlive.io/referenced"

// Fleet is an informer-backed view of VMs and what they reference.
type Fleet struct {
	Clients   kube.Clients
	vms       cache.SharedIndexInformer
	vmis      cache.SharedIndexInformer
	kubevirts cache.SharedIndexInformer
	revisions cache.SharedIndexInformer
	objects   kube.ObjectInformers

	// specs caches decoded revision data by object UID and generation: every
	// VM pinned to one generation shares it, so each is decoded once.
	specs sync.Map
}

// New builds a Fleet over namespace ("" for all); Run starts it.
func New(c kube.Clients, namespace string) *Fleet {
	return &Fleet{
		Clients:   c,
		vms:       c.VMInformer(namespace, cache.Indexers{RefIndex: IndexRefs}),
		vmis:      c.VMIInformer(namespace),
		kubevirts: c.KubeVirtInformer(),
		revisions: c.RevisionInformer(namespace),
		objects:   c.NewObjectInformers(namespace),
	}
}

// Run starts every informer and waits for their caches; they stop with ctx.
func (f *Fleet) Run(ctx context.Context) error {
	for _, inf := range []cache.SharedIndexInformer{f.vms, f.vmis, f.kubevirts, f.revisions} {
		go inf.RunWithContext(ctx)
	}
	f.objects.Run(ctx)
	synced := []cache.InformerSynced{f.vms.HasSynced, f.vmis.HasSynced, f.kubevirts.HasSynced, f.revisions.HasSynced, f.objects.HasSynced}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("fleet: caches did not sync: %w", ctx.Err())
	}
	return nil
}

// VMInformer exposes the VM informer so stages can add handlers.
func (f *Fleet) VMInformer() cache.SharedIndexInformer { return f.vms }

// IndexRefs files a VM under every instance type and preference it references.
func IndexRefs(obj any) ([]string, error) {
	vm, ok := obj.(*virtv1.VirtualMachine)
	if !ok {
		return nil, nil
	}
	var keys []string
	if r, ok := InstancetypeRef(vm); ok {
		keys = append(keys, r.Key())
	}
	if r, ok := PreferenceRef(vm); ok {
		keys = append(keys, r.Key())
	}
	return keys, nil
}

// InstancetypeRef is the instance type vm references, if any.
func InstancetypeRef(vm *virtv1.VirtualMachine) (events.Ref, bool) {
	m := vm.Spec.Instancetype
	if m == nil || m.Name == "" {
		return events.Ref{}, false
	}
	return matcherRef(m.Kind, m.Name, vm.Namespace, false)
}

// PreferenceRef is the preference vm references, if any.
func PreferenceRef(vm *virtv1.VirtualMachine) (events.Ref, bool) {
	m := vm.Spec.Preference
	if m == nil || m.Name == "" {
		return events.Ref{}, false
	}
	return matcherRef(m.Kind, m.Name, vm.Namespace, true)
}

func matcherRef(kind, name, namespace string, preference bool) (events.Ref, bool) {
	k, err := events.NormalizeKind(kind, preference)
	if err != nil {
		return events.Ref{}, false
	}
	r := events.Ref{Kind: k, Name: name}
	if !r.IsClusterScoped() {
		r.Namespace = namespace
	}
	return r, true
}

// Referencing returns the VMs that reference ref, optionally narrowed to a
// namespace and a label selector. The objects are the informer's: callers
// must not mutate them.
func (f *Fleet) Referencing(ref events.Ref, namespace string, selector labels.Selector) ([]*virtv1.VirtualMachine, error) {
	objs, err := f.vms.GetIndexer().ByIndex(RefIndex, ref.Key())
	if err != nil {
		return nil, fmt.Errorf("fleet: index %s: %w", ref.Key(), err)
	}
	vms := make([]*virtv1.VirtualMachine, 0, len(objs))
	for _, o := range objs {
		vm := o.(*virtv1.VirtualMachine)
		if namespace != "" && vm.Namespace != namespace {
			continue
		}
		if selector != nil && !selector.Matches(labels.Set(vm.Labels)) {
			continue
		}
		vms = append(vms, vm)
	}
	return vms, nil
}

// VM returns the cached VM, or nil.
func (f *Fleet) VM(namespace, name string) *virtv1.VirtualMachine {
	o, ok, _ := f.vms.GetIndexer().GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	return o.(*virtv1.VirtualMachine)
}

// VMI returns the cached VMI of a VM, or nil when it is not running.
func (f *Fleet) VMI(namespace, name string) *virtv1.VirtualMachineInstance {
	o, ok, _ := f.vmis.GetIndexer().GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	return o.(*virtv1.VirtualMachineInstance)
}

// Cluster reads the live-update configuration from the KubeVirt CR.
func (f *Fleet) Cluster() liveplan.Cluster {
	var kv *virtv1.KubeVirt
	for _, o := range f.kubevirts.GetStore().List() {
		kv = o.(*virtv1.KubeVirt)
		break
	}
	return liveplan.ClusterFromKubeVirt(kv)
}

// Object returns the live instance type or preference ref names, or nil.
func (f *Fleet) Object(ref events.Ref) any {
	inf, ok := f.objects[ref.Kind]
	if !ok {
		return nil
	}
	key := ref.Name
	if !ref.IsClusterScoped() {
		key = ref.Namespace + "/" + ref.Name
	}
	o, ok, _ := inf.GetIndexer().GetByKey(key)
	if !ok {
		return nil
	}
	return o
}
