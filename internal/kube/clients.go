package kube

import (
	"fmt"
	"os"
	"sync"
	"time"

	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"kubevirt.io/client-go/kubevirt"
)

// Clients are the two clientsets kvlive uses: core Kubernetes for
// ControllerRevisions, KubeVirt's generated clientset for everything else.
// Both have fakes, so the same code runs in unit tests, the demo and a cluster.
type Clients struct {
	Kube kubernetes.Interface
	Virt kubevirt.Interface
	// Host is the API server's URL and Timeout the per-request timeout
	// (--request-timeout), for messages and preflight; empty on fakes.
	Host    string
	Timeout time.Duration
}

// NewClients builds both clientsets from one REST config, for a real API
// server: from then on the process's informers stream their first lists
// (streamInitialLists).
func NewClients(cfg *rest.Config) (Clients, error) {
	streamInitialLists()
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	vc, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("kubevirt client: %w", err)
	}
	return Clients{Kube: kc, Virt: vc, Host: cfg.Host, Timeout: cfg.Timeout}, nil
}

// watchListEnv is the environment variable client-go reads its
// WatchListClient gate from; set, it decides.
const watchListEnv = "KUBE_FEATURE_" + string(clientfeatures.WatchListClient)

var streamOnce sync.Once

// streamInitialLists turns on client-go's WatchListClient gate for the
// process, unless watchListEnv is set: an informer's first list then
// arrives as a watch that sends the existing objects one by one and a
// bookmark (sendInitialEvents, on by default in API servers since 1.34;
// where a server refuses it the reflector lists as before), so each
// object is decoded and trimmed by the cache's transform as it comes, not
// held with the whole fleet in one decoded list first. With 100,000 VMs
// that list took the heap to 1.8 GiB, and what it left behind stayed
// fragmented (docs/performance.md). The gate is process-wide, so only
// NewClients turns it on: client-go's fake clientsets, which the demo and
// unit tests use, send no such bookmark.
func streamInitialLists() {
	streamOnce.Do(func() {
		if _, set := os.LookupEnv(watchListEnv); set {
			return
		}
		clientfeatures.ReplaceFeatureGates(watchListOn{clientfeatures.FeatureGates()})
	})
}

// watchListOn is client-go's gates with WatchListClient on.
type watchListOn struct{ clientfeatures.Gates }

// Enabled reports whether feature is on.
func (g watchListOn) Enabled(feature clientfeatures.Feature) bool {
	return feature == clientfeatures.WatchListClient || g.Gates.Enabled(feature)
}
