package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/instancetype"
)

// startedTimeout bounds reading one VM start revision from the API server.
const startedTimeout = 10 * time.Second

// startedCacheSize bounds the start specs kept; past it the cache starts
// afresh. Start revisions never change, so a kept one is never stale.
const startedCacheSize = 4096

// startedSpecs keeps VM start specs by namespace/revision name.
type startedSpecs struct {
	mu    sync.Mutex
	specs map[string]*virtv1.VirtualMachineSpec
}

// StartedSpec returns the VM spec vmi started from: the ControllerRevision
// virt-controller wrote when it created the VMI, named in
// vmi.status.virtualMachineRevisionName. Those revisions carry no label
// kvlive could watch them by, so each is read once from the API server (a
// VM needs it only while it has RestartRequired) and kept. The read ends
// with the cache (the context Start was given) or after startedTimeout.
func (c *Cache) StartedSpec(vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineSpec, error) {
	name := vmi.Status.VirtualMachineRevisionName
	if name == "" {
		return nil, fmt.Errorf("VMI %s/%s names no start revision", vmi.Namespace, vmi.Name)
	}
	key := vmi.Namespace + "/" + name
	c.started.mu.Lock()
	spec, ok := c.started.specs[key]
	c.started.mu.Unlock()
	if ok {
		return spec, nil
	}
	ctx, cancel := context.WithTimeout(c.lifeContext(), startedTimeout)
	defer cancel()
	cr, err := c.readRevision(ctx, vmi.Namespace, name)
	if err != nil {
		return nil, fmt.Errorf("start revision %s: %w", key, err)
	}
	// pkg/virt-controller/watch/vm VirtualMachineRevisionData.
	var data struct {
		Spec virtv1.VirtualMachineSpec `json:"spec"`
	}
	if err := json.Unmarshal(cr.Data.Raw, &data); err != nil {
		return nil, fmt.Errorf("start revision %s: %w", key, err)
	}
	if c.trim {
		instancetype.TrimTemplate(data.Spec.Template)
	}
	c.started.mu.Lock()
	if c.started.specs == nil || len(c.started.specs) >= startedCacheSize {
		c.started.specs = map[string]*virtv1.VirtualMachineSpec{}
	}
	c.started.specs[key] = &data.Spec
	c.started.mu.Unlock()
	return &data.Spec, nil
}
