package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// StripUnread is the informers' transform: it drops from each object the
// cache keeps what kvlive never reads, its managed fields and kubectl's
// last-applied-configuration annotation, which together are often larger
// than the rest of a VM (hack/bench.sh measures it). Anything else, a
// tombstone included, passes through unchanged.
func StripUnread(obj any) (any, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	m.SetManagedFields(nil)
	if ann := m.GetAnnotations(); ann[corev1.LastAppliedConfigAnnotation] != "" {
		kept := make(map[string]string, len(ann)-1)
		for k, v := range ann {
			if k != corev1.LastAppliedConfigAnnotation {
				kept[k] = v
			}
		}
		m.SetAnnotations(kept)
	}
	return obj, nil
}
