package kube

import (
	"slices"
	"strings"
	"sync"
	"unsafe"
	"weak"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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

// intern shares obj's labels and annotations, and a revision's snapshot,
// with the equal ones of objects cached before it.
func intern(obj any) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	m.SetLabels(internMap(m.GetLabels()))
	m.SetAnnotations(internMap(m.GetAnnotations()))
	if cr, ok := obj.(*appsv1.ControllerRevision); ok {
		cr.Data.Raw = internBytes(cr.Data.Raw)
	}
}
