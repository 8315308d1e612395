package instancetype

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"
)

// defaultMaxHotplugRatio is KubeVirt's default when the CR sets none
// (pkg/virt-config, DefaultMaxHotplugRatio).
const defaultMaxHotplugRatio = 4

// Cluster is the part of the KubeVirt CR that decides how changes land.
type Cluster struct {
	// LiveUpdate is false under the Stage rollout strategy.
	LiveUpdate bool
	// LiveMigrate is whether workloadUpdateMethods holds LiveMigrate, without
	// which hot-plugged CPU and memory never reach the guest.
	LiveMigrate bool
	// Evict is whether workloadUpdateMethods holds Evict: a VMI the
	// workload updater cannot live-migrate is evicted instead.
	Evict bool
	// ReferencePolicy is spec.configuration.instancetype.referencePolicy.
	ReferencePolicy string
	// MaxHotplugRatio, MaxCPUSockets and MaxGuest are liveUpdateConfiguration.
	MaxHotplugRatio uint32
	MaxCPUSockets   *uint32
	MaxGuest        *resource.Quantity
}

// ClusterFromKubeVirt reads a KubeVirt CR; nil means a cluster with KubeVirt's
// v1.9 defaults (LiveUpdate, LiveMigrate, ratio 4).
func ClusterFromKubeVirt(kv *virtv1.KubeVirt) Cluster {
	c := Cluster{LiveUpdate: true, LiveMigrate: true, MaxHotplugRatio: defaultMaxHotplugRatio}
	if kv == nil {
		return c
	}
	cfg := kv.Spec.Configuration
	// pkg/virt-config/feature-gates.go IsVMRolloutStrategyLiveUpdate: unset
	// means LiveUpdate since v1.6.
	if s := cfg.VMRolloutStrategy; s != nil && *s == virtv1.VMRolloutStrategyStage {
		c.LiveUpdate = false
	}
	// An empty workloadUpdateMethods list leaves the workload updater idle.
	c.LiveMigrate = slices.Contains(kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods, virtv1.WorkloadUpdateMethodLiveMigrate)
	c.Evict = slices.Contains(kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods, virtv1.WorkloadUpdateMethodEvict)
	if cfg.Instancetype != nil && cfg.Instancetype.ReferencePolicy != nil {
		c.ReferencePolicy = string(*cfg.Instancetype.ReferencePolicy)
	}
	if lu := cfg.LiveUpdateConfiguration; lu != nil {
		if lu.MaxHotplugRatio > 0 {
			c.MaxHotplugRatio = lu.MaxHotplugRatio
		}
		c.MaxCPUSockets = lu.MaxCpuSockets
		c.MaxGuest = lu.MaxGuest
	}
	return c
}

// expandsReferences reports whether KubeVirt writes instance types into VM
// specs, leaving no reference for kvlive to move.
func (c Cluster) expandsReferences() bool {
	return c.ReferencePolicy == string(virtv1.Expand) || c.ReferencePolicy == string(virtv1.ExpandAll)
}
