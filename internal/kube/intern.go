package kube

import (
	"slices"
	"strings"
	"sync"
	"unique"
	"unsafe"
	"weak"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// A fleet's cached objects repeat themselves: every VM pinned to one
// generation of an instance type has its own ControllerRevision, with the
// same labels and the same snapshot, and VMs made from one template carry
// the same labels and annotations. The cache's transform shares each
// such map and each snapshot among the objects holding an equal one, so
// a hundred thousand revisions of one generation hold one snapshot.
// Objects in an informer's store are never written to (client-go's
// contract), so sharing is safe; a DeepCopy copies as always.

// maxInternedMaps bounds the distinct maps kept for sharing; past it the
// pool starts afresh (what was shared stays shared).
const maxInternedMaps = 1 << 14

var sharedMaps = struct {
	sync.Mutex
	pool map[string]map[string]string
}{}

// internMap returns a map equal to m that other objects may hold too.
func internMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	keys := make([]string, 0, len(m))
	size := 0
	for k, v := range m {
		keys = append(keys, k)
		size += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	key := b.String()
	sharedMaps.Lock()
	defer sharedMaps.Unlock()
	if shared, ok := sharedMaps.pool[key]; ok {
		return shared
	}
	if sharedMaps.pool == nil || len(sharedMaps.pool) >= maxInternedMaps {
		sharedMaps.pool = map[string]map[string]string{}
	}
	sharedMaps.pool[key] = m
	return m
}

// snapshots shares equal revision data by weak reference: an entry lives
// as long as some cached revision holds its bytes.
var snapshots = struct {
	sync.Mutex
	pool map[string]weak.Pointer[byte]
}{pool: map[string]weak.Pointer[byte]{}}

// internBytes returns bytes equal to b that other objects may hold too.
func internBytes(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	snapshots.Lock()
	defer snapshots.Unlock()
	if p := snapshots.pool[string(b)].Value(); p != nil {
		return unsafe.Slice(p, len(b))
	}
	if len(snapshots.pool) >= maxInternedMaps {
		for k, w := range snapshots.pool {
			if w.Value() == nil {
				delete(snapshots.pool, k)
			}
		}
	}
	snapshots.pool[string(b)] = weak.Make(&b[0])
	return b
}

// intern shares obj's labels and annotations (a revision's labels only)
// and a revision's snapshot with the equal ones of objects cached before
// it, and the strings that repeat from object to object (namespaces,
// finalizers, owners' kinds, instance type and preference names,
// condition reasons) with every other object holding an equal one
// (internStrings).
func intern(obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	m.SetLabels(internMap(m.GetLabels()))
	cr, revision := obj.(*appsv1.ControllerRevision)
	if !revision {
		// A revision's annotations are shared without kvlive's, which
		// names the revision each supersedes (no other revision does),
		// so each would only have filled the pool: storeRevision keeps
		// it apart and shares the others.
		m.SetAnnotations(internMap(m.GetAnnotations()))
	}
	internStrings(obj, m)
	if revision {
		cr.Data.Raw = internBytes(cr.Data.Raw)
	}
}

// internStrings makes each string of obj that objects of a fleet repeat
// the one canonical copy of it (package unique), in place. Names, uids and
// resource versions, which no two objects share, are left alone. m is
// obj's metadata.
func internStrings(obj any, m metav1.Object) {
	ns := m.GetNamespace()
	shared(&ns)
	m.SetNamespace(ns)
	fs := m.GetFinalizers() // the object's own slice: interned in place
	for i := range fs {
		shared(&fs[i])
	}
	refs := m.GetOwnerReferences()
	for i := range refs {
		shared(&refs[i].APIVersion)
		shared(&refs[i].Kind)
	}
	switch o := obj.(type) {
	case *virtv1.VirtualMachine:
		if it := o.Spec.Instancetype; it != nil {
			shared(&it.Kind)
			shared(&it.Name)
		}
		if p := o.Spec.Preference; p != nil {
			shared(&p.Kind)
			shared(&p.Name)
		}
		for _, r := range []*virtv1.InstancetypeStatusRef{o.Status.InstancetypeRef, o.Status.PreferenceRef} {
			if r != nil {
				shared(&r.Kind)
				shared(&r.Name)
			}
		}
		sharedAs(&o.Status.PrintableStatus)
		for i := range o.Status.Conditions {
			c := &o.Status.Conditions[i]
			sharedCondition(&c.Type, &c.Status, &c.Reason, &c.Message)
		}
	case *virtv1.VirtualMachineInstance:
		sharedAs(&o.Status.Phase)
		for i := range o.Status.Conditions {
			c := &o.Status.Conditions[i]
			sharedCondition(&c.Type, &c.Status, &c.Reason, &c.Message)
		}
	}
}

// sharedCondition shares the strings of a VM's or a VMI's condition (two
// types with the same fields).
func sharedCondition[T, S ~string](typ *T, status *S, reason, message *string) {
	sharedAs(typ)
	sharedAs(status)
	shared(reason)
	shared(message)
}

// shared replaces *s by its canonical copy.
func shared(s *string) { *s = unique.Make(*s).Value() }

// sharedAs is shared for the string types of the API (phases, condition
// types and statuses).
func sharedAs[S ~string](s *S) { *s = S(unique.Make(string(*s)).Value()) }
