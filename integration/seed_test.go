//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/integration/framework"
	"kvlive/internal/kube"
)

// The cluster instance types every test fleet has. Tests edit medium in
// place (2→3 vCPUs, 4Gi→6Gi) and switch VMs from medium to large; all
// changes stay within the VMIs' hotplug limits (hotplugRatio).
const (
	itSmall  = "u1.small"
	itMedium = "u1.medium"
	itLarge  = "u1.large"
	// hotplugRatio is the KubeVirt CR's maxHotplugRatio, and the ratio the
	// seeded VMIs' maxSockets and maxGuest were defaulted with.
	hotplugRatio = 4
	// seedWorkers is how many objects are created at once.
	seedWorkers = 32
)

// instancetypes are the specs the fleet's instance types start with.
var instancetypes = map[string]v1beta1.VirtualMachineInstancetypeSpec{
	itSmall:  itSpec(1, "2Gi"),
	itMedium: itSpec(2, "4Gi"),
	itLarge:  itSpec(4, "8Gi"),
}

func itSpec(vcpus uint32, mem string) v1beta1.VirtualMachineInstancetypeSpec {
	return v1beta1.VirtualMachineInstancetypeSpec{
		CPU:    v1beta1.CPUInstancetype{Guest: vcpus},
		Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse(mem)},
	}
}

// fleetOptions size a test fleet: how many VMs reference each cluster
// instance type, spread round-robin over namespaces.
type fleetOptions struct {
	namespaces int
	perIT      map[string]int
	// secureNATS runs NATS with TLS and users; kvlive processes the env
	// starts get the flags that reach it (env.natsArgs).
	secureNATS bool
	// natsNKeys are public keys of further users a secured NATS lets in.
	natsNKeys []string
	// tokenNATS runs NATS requiring a token and a client certificate
	// (mutual TLS); kvlive processes get both (env.natsArgs).
	tokenNATS bool
	// credsNATS runs NATS in operator mode (JWT authentication); kvlive
	// processes get a credentials file (env.natsArgs).
	credsNATS bool
	// natsCluster, when set, runs a JetStream cluster of that many
	// nats-server nodes instead of one server.
	natsCluster int
	// stopped makes every VM of the fleet stopped (run strategy Halted).
	stopped bool
	// live makes every VM of the fleet running and live-migratable.
	live bool
	// migration is how long each of the stand-in's live migrations takes
	// (zero: it ends at the stand-in's next look).
	migration time.Duration
	// natsRoles are further users of a secured NATS, each limited to a
	// role of deploy/nats/kvlive-permissions.conf (user to role variable);
	// env.natsUser gives the flags that connect as one.
	natsRoles map[string]string
}

// vmShape is how a VM was built; what kvlive must do with it follows from it.
type vmShape struct {
	namespace, name string
	instancetype    string
	tier            string
	running         bool
	migratable      bool
}

// key is the VM's namespace/name.
func (s vmShape) key() string { return s.namespace + "/" + s.name }

// expected is the result an edit of the VM's instance type that grows CPU
// sockets and memory within the hotplug limits must have: live on a running
// migratable VM, restart where memory cannot hot-plug (not migratable), and
// next-boot on a stopped VM.
func (s vmShape) expected() events.Result {
	switch {
	case !s.running:
		return events.ResultNextBoot
	case !s.migratable:
		return events.ResultRestart
	}
	return events.ResultLive
}

// shapes lists the fleet's VMs. Of every 4 VMs of an instance type 3 run
// (none with stopped, all with live),
// and every 8th running VM is not live-migratable (none with live); tiers rotate web, db,
// batch. Names follow the instance type: u1-medium-0007.
func (o fleetOptions) shapes() []vmShape {
	tiers := []string{"web", "db", "batch"}
	var out []vmShape
	for _, it := range []string{itSmall, itMedium, itLarge} {
		for i := range o.perIT[it] {
			out = append(out, vmShape{
				namespace:    namespaceName(i % o.namespaces),
				name:         fmt.Sprintf("%s-%04d", strings.ReplaceAll(it, ".", "-"), i),
				instancetype: it,
				tier:         tiers[i%len(tiers)],
				running:      o.live || (!o.stopped && i%4 != 3),
				migratable:   o.live || i%8 != 5,
			})
		}
	}
	return out
}

func namespaceName(i int) string { return fmt.Sprintf("team-%d", i+1) }

// seed creates the namespaces, the KubeVirt CR, the instance types and the
// fleet's VMs, with a VMI for each running VM. VMs are created unpinned:
// the stand-in pins them, as virt-controller does.
func seed(ctx context.Context, t *testing.T, c kube.Clients, o fleetOptions, shapes []vmShape) {
	t.Helper()
	names := []string{"kubevirt"}
	for i := range o.namespaces {
		names = append(names, namespaceName(i))
	}
	for _, name := range names {
		ns := &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatalf("seed: namespace: %v", err)
		}
	}
	if err := createDeployedKubeVirt(ctx, c); err != nil {
		t.Fatalf("seed: KubeVirt CR: %v", err)
	}
	for name, spec := range instancetypes {
		it := &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		if _, err := c.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Create(ctx, it, metav1.CreateOptions{}); err != nil {
			t.Fatalf("seed: instance type %s: %v", name, err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(seedWorkers)
	for _, s := range shapes {
		g.Go(func() error { return createVM(gctx, c, s) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("seed: %v", err)
	}
}

// createVM creates the VM and, when it runs, its VMI.
func createVM(ctx context.Context, c kube.Clients, s vmShape) error {
	if _, err := c.Virt.KubevirtV1().VirtualMachines(s.namespace).Create(ctx, newVM(s), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("VM %s: %w", s.key(), err)
	}
	if !s.running {
		return nil
	}
	if _, err := c.Virt.KubevirtV1().VirtualMachineInstances(s.namespace).Create(ctx, newVMI(s), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("VMI %s: %w", s.key(), err)
	}
	return nil
}

// createDeployedKubeVirt creates kubevirtCR and reports it Deployed, as
// virt-operator does once KubeVirt is installed: KubeVirt's workload
// updater starts no migration before.
func createDeployedKubeVirt(ctx context.Context, c kube.Clients) error {
	cr, err := c.Virt.KubevirtV1().KubeVirts(framework.KubeVirtNamespace).Create(ctx, kubevirtCR(), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	cr.Status.Phase = virtv1.KubeVirtPhaseDeployed
	_, err = c.Virt.KubevirtV1().KubeVirts(framework.KubeVirtNamespace).UpdateStatus(ctx, cr, metav1.UpdateOptions{})
	return err
}

// kubevirtCR configures LiveUpdate with live migration and the hotplug ratio.
func kubevirtCR() *virtv1.KubeVirt {
	strategy := virtv1.VMRolloutStrategyLiveUpdate
	return &virtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"},
		Spec: virtv1.KubeVirtSpec{
			Configuration: virtv1.KubeVirtConfiguration{
				VMRolloutStrategy:       &strategy,
				LiveUpdateConfiguration: &virtv1.LiveUpdateConfiguration{MaxHotplugRatio: hotplugRatio},
			},
			WorkloadUpdateStrategy: virtv1.KubeVirtWorkloadUpdateStrategy{
				WorkloadUpdateMethods: []virtv1.WorkloadUpdateMethod{virtv1.WorkloadUpdateMethodLiveMigrate},
			},
		},
	}
}

func newVM(s vmShape) *virtv1.VirtualMachine {
	strategy := virtv1.RunStrategyHalted
	if s.running {
		strategy = virtv1.RunStrategyAlways
	}
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace, Labels: map[string]string{"tier": s.tier}},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy:  &strategy,
			Instancetype: &virtv1.InstancetypeMatcher{Kind: events.KindClusterInstancetype, Name: s.instancetype},
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kubevirt.io/vm": s.name}},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Architecture: "amd64",
					Domain:       virtv1.DomainSpec{Devices: virtv1.Devices{}},
				},
			},
		},
	}
}

// newVMI is a running instance as virt-controller starts it under
// LiveUpdate: sockets and memory from the instance type, hotplug limits
// defaulted from the ratio (pkg/defaults), memory at boot recorded.
func newVMI(s vmShape) *virtv1.VirtualMachineInstance {
	it := instancetypes[s.instancetype]
	guest := it.Memory.Guest.DeepCopy()
	maxGuest := resource.NewQuantity(guest.Value()*hotplugRatio, resource.BinarySI)
	migratable := k8scorev1.ConditionTrue
	if !s.migratable {
		migratable = k8scorev1.ConditionFalse
	}
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace, Labels: map[string]string{"kubevirt.io/vm": s.name}},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Architecture: "amd64",
			Domain: virtv1.DomainSpec{
				CPU:     &virtv1.CPU{Sockets: it.CPU.Guest, Cores: 1, Threads: 1, MaxSockets: it.CPU.Guest * hotplugRatio},
				Memory:  &virtv1.Memory{Guest: &guest, MaxGuest: maxGuest},
				Devices: virtv1.Devices{},
			},
		},
		Status: virtv1.VirtualMachineInstanceStatus{
			Phase: virtv1.Running,
			Conditions: []virtv1.VirtualMachineInstanceCondition{
				{Type: virtv1.VirtualMachineInstanceReady, Status: k8scorev1.ConditionTrue},
				{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: migratable},
			},
			CurrentCPUTopology: &virtv1.CPUTopology{Sockets: it.CPU.Guest, Cores: 1, Threads: 1},
			Memory:             &virtv1.MemoryStatus{GuestAtBoot: &guest, GuestCurrent: &guest, GuestRequested: &guest},
		},
	}
}
