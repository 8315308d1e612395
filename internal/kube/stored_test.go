package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/instancetype"
)

// A VM and its VMI as the API server serves them: a template with disks,
// a cloud-init volume, firmware, CPU and memory, labels and annotations;
// a VMI with devices, interfaces and guest OS beside what kvlive reads.
const (
	servedVM = `{"metadata":{"name":"web-1","namespace":"team-1","uid":"0b7d3c9e-7c53-4b0e-9d47-7a5d2c1a0e11","resourceVersion":"42","generation":3,
"labels":{"tier":"web"},"annotations":{"kubevirt.io/latest-observed-api-version":"v1"},"finalizers":["kubevirt.io/virtualMachineControllerFinalize"],
"managedFields":[{"manager":"kvlive","operation":"Apply","apiVersion":"kubevirt.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:instancetype":{"f:name":{}}}}}]},
"spec":{"runStrategy":"Always","instancetype":{"kind":"VirtualMachineClusterInstancetype","name":"u1.medium","revisionName":"web-1-u1.medium-1"},
"preference":{"kind":"VirtualMachineClusterPreference","name":"fedora"},
"dataVolumeTemplates":[{"metadata":{"name":"root"},"spec":{"storage":{"resources":{"requests":{"storage":"30Gi"}}}}}],
"template":{"metadata":{"labels":{"kubevirt.io/vm":"web-1"},"annotations":{"a":"b"}},"spec":{"architecture":"amd64",
"domain":{"cpu":{"maxSockets":8},"memory":{"maxGuest":"16Gi"},"firmware":{"uuid":"5d1c3f0a-8d7e-4bb0-9a43-2b1f1c7d9e10"},"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}},{"name":"cloudinit","disk":{"bus":"virtio"}}],"interfaces":[{"name":"default","masquerade":{}}]},"resources":{}},
"networks":[{"name":"default","pod":{}}],
"volumes":[{"name":"root","dataVolume":{"name":"root"}},{"name":"cloudinit","cloudInitNoCloud":{"userData":"#cloud-config\npassword: fedora\n"}}]}}},
"status":{"printableStatus":"Running","ready":true,"created":true,
"instancetypeRef":{"kind":"VirtualMachineClusterInstancetype","name":"u1.medium","controllerRevisionRef":{"name":"web-1-u1.medium-1"}},
"conditions":[{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-12-03T03:00:01Z"}],
"volumeSnapshotStatuses":[{"name":"root","enabled":false}]}}`
	servedVMI = `{"metadata":{"name":"web-1","namespace":"team-1","uid":"7f3e","resourceVersion":"43","labels":{"kubevirt.io/vm":"web-1"},"annotations":{"kubevirt.io/latest-observed-api-version":"v1"}},
"spec":{"architecture":"amd64","domain":{"cpu":{"sockets":2,"cores":1,"threads":1,"maxSockets":8},"memory":{"guest":"4Gi","maxGuest":"16Gi"},
"devices":{"disks":[{"name":"root"}]},"resources":{"requests":{"memory":"4Gi"}}},"volumes":[{"name":"root","dataVolume":{"name":"root"}}]},
"status":{"phase":"Running","nodeName":"node-1","conditions":[{"type":"Ready","status":"True"},{"type":"LiveMigratable","status":"True"}],
"memory":{"guestAtBoot":"4Gi","guestCurrent":"4Gi","guestRequested":"4Gi"},"currentCPUTopology":{"sockets":2,"cores":1,"threads":1},
"virtualMachineRevisionName":"revision-start-web-1-3","interfaces":[{"name":"default","ipAddress":"10.0.0.7"}],"guestOSInfo":{"name":"Fedora Linux"}}}`
)

func served[T any](t testing.TB, raw string) *T {
	t.Helper()
	var obj T
	if err := json.Unmarshal([]byte(raw), &obj); err != nil {
		t.Fatal(err)
	}
	return &obj
}

// trimmedTyped is what the cache kept before stored forms: the objects
// trimmed in their Go types.
func trimmedTyped(t *testing.T) (*virtv1.VirtualMachine, *virtv1.VirtualMachineInstance) {
	t.Helper()
	vm := served[virtv1.VirtualMachine](t, servedVM)
	if _, err := StripUnread(vm); err != nil {
		t.Fatal(err)
	}
	instancetype.TrimVM(vm)
	vmi := served[virtv1.VirtualMachineInstance](t, servedVMI)
	if _, err := StripUnread(vmi); err != nil {
		t.Fatal(err)
	}
	return vm, instancetype.TrimVMI(vmi)
}

// readBack is what a trimmed cache hands out for a served VM and VMI:
// TrimUnread's stored forms, read as the cache reads them.
func readBack(t *testing.T) (*virtv1.VirtualMachine, *virtv1.VirtualMachineInstance) {
	t.Helper()
	transform := func(obj any) any {
		out, err := TrimUnread(obj)
		if err != nil {
			t.Fatal(err)
		}
		again, err := TrimUnread(out) // a relist passes stored objects again
		if err != nil || again != out {
			t.Fatalf("a stored object transformed again: %v, %v (%T)", err, again == out, out)
		}
		return out
	}
	vm, vmi := transform(served[virtv1.VirtualMachine](t, servedVM)), transform(served[virtv1.VirtualMachineInstance](t, servedVMI))
	if s, ok := vm.(*storedVM); !ok || s.typed != nil {
		t.Fatalf("a VM is cached as %T, not in its compact form", vm)
	}
	if _, ok := vmi.(*storedVMI); !ok {
		t.Fatalf("a VMI is cached as %T", vmi)
	}
	return asVM(vm), asVMI(vmi)
}

// TestStoredObjectsReadBackAsTrimmed: the VM and VMI a trimmed cache
// hands out are the trimmed objects, field for field (the same JSON), and
// every read gets a template of its own.
func TestStoredObjectsReadBackAsTrimmed(t *testing.T) {
	wantVM, wantVMI := trimmedTyped(t)
	gotVM, gotVMI := readBack(t)
	same := func(what string, got, want any) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) || !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("%s read back\n%s\nwant\n%s", what, g, w)
		}
	}
	same("VM", gotVM, wantVM)
	same("VMI", gotVMI, wantVMI)
	if !reflect.DeepEqual(gotVMI, wantVMI) {
		t.Errorf("VMI read back differs in Go from TrimVMI's: %+v", gotVMI)
	}
	if gotVM.Spec.Template == nil || gotVM.Spec.Template.Spec.Volumes[1].CloudInitNoCloud.UserData == "#cloud-config\npassword: fedora\n" {
		t.Fatalf("template read back without its trim: %+v", gotVM.Spec.Template)
	}
	s, err := TrimUnread(served[virtv1.VirtualMachine](t, servedVM))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := asVM(s), asVM(s); a.Spec.Template == b.Spec.Template {
		t.Error("two reads of a VM share one template")
	}
}

// TestStoredVMKeepsWhatItCannotCompact: a VM holding more than the
// compact form keeps (a state change request, a reference inferred from a
// volume, another type meta) is kept typed and reads back whole; a VM
// with kubevirt.io/v1's type meta (a fake clientset's) is compact and
// reads back with it. Every one reads back equal to what was stored.
func TestStoredVMKeepsWhatItCannotCompact(t *testing.T) {
	policy := virtv1.IgnoreInferFromVolumeFailure
	for _, c := range []struct {
		name    string
		edit    func(*virtv1.VirtualMachine)
		compact bool
	}{
		{"as served", func(*virtv1.VirtualMachine) {}, true},
		{"kinded", func(vm *virtv1.VirtualMachine) { vm.TypeMeta = vmTypeMeta }, true},
		{"stopped, running false, no pins", func(vm *virtv1.VirtualMachine) {
			f := false
			vm.Spec.RunStrategy, vm.Spec.Running, vm.Status = nil, &f, virtv1.VirtualMachineStatus{}
		}, true},
		{"another type meta", func(vm *virtv1.VirtualMachine) { vm.Kind = "Other" }, false},
		{"a state change request", func(vm *virtv1.VirtualMachine) {
			vm.Status.StateChangeRequests = []virtv1.VirtualMachineStateChangeRequest{{Action: virtv1.StopRequest}}
		}, false},
		{"an instance type inferred from a volume", func(vm *virtv1.VirtualMachine) {
			vm.Spec.Instancetype.InferFromVolume, vm.Spec.Instancetype.InferFromVolumeFailurePolicy = "root", &policy
		}, false},
		{"a preference pin inferred from a volume", func(vm *virtv1.VirtualMachine) {
			vm.Status.PreferenceRef = &virtv1.InstancetypeStatusRef{Name: "fedora", InferFromVolume: "root"}
		}, false},
		{"a pin without its revision", func(vm *virtv1.VirtualMachine) {
			vm.Status.InstancetypeRef.ControllerRevisionRef = nil
			vm.Status.PreferenceRef = &virtv1.InstancetypeStatusRef{Name: "fedora", Kind: "VirtualMachineClusterPreference"}
		}, true},
		{"a data volume template", func(vm *virtv1.VirtualMachine) {
			vm.Spec.DataVolumeTemplates = []virtv1.DataVolumeTemplateSpec{{}}
			vm.Spec.DataVolumeTemplates[0].Name = "root"
		}, false},
		{"an update volumes strategy", func(vm *virtv1.VirtualMachine) {
			strategy := virtv1.UpdateVolumesStrategyMigration
			vm.Spec.UpdateVolumesStrategy = &strategy
		}, false},
		{"a preference inferred from a volume", func(vm *virtv1.VirtualMachine) {
			vm.Spec.Preference.InferFromVolume = "root"
		}, false},
		{"an instance type pin inferred from a volume", func(vm *virtv1.VirtualMachine) {
			vm.Status.InstancetypeRef.InferFromVolumeFailurePolicy = &policy
		}, false},
		{"an owner", func(vm *virtv1.VirtualMachine) {
			vm.OwnerReferences = []metav1.OwnerReference{{Kind: "VirtualMachinePool", Name: "pool", UID: "1"}}
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			vm := served[virtv1.VirtualMachine](t, servedVM)
			if _, err := StripUnread(vm); err != nil {
				t.Fatal(err)
			}
			instancetype.TrimVM(vm)
			c.edit(vm)
			want := vm.DeepCopy()
			s, err := storeVM(vm)
			if err != nil {
				t.Fatal(err)
			}
			if compact := s.typed == nil; compact != c.compact {
				t.Errorf("compact %v, want %v", compact, c.compact)
			}
			if got := s.object(); !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				t.Errorf("read back\n%s\nwant\n%s", g, w)
			}
			if keys, err := indexRefs(s); err != nil || !slices.Equal(keys, instancetype.RefKeys(want)) || len(keys) != 2 {
				t.Errorf("indexed by %v (%v), want %v", keys, err, instancetype.RefKeys(want))
			}
			if m, err := meta.Accessor(s); err != nil || m.GetName() != "web-1" || m.GetNamespace() != "team-1" || m.GetResourceVersion() != "42" {
				t.Errorf("metadata for keys: %v, %v", m, err)
			}
		})
	}
}

// TestPlansSameFromStoredObjects: a running VM with a preference, moved
// to a larger instance type, is planned the same from the trimmed typed
// objects and from what a trimmed cache hands out.
func TestPlansSameFromStoredObjects(t *testing.T) {
	gen := func(cpus uint32, mem string) instancetype.Generation {
		return instancetype.Generation{
			Instancetype: &v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: cpus}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse(mem)}},
			Preference:   &v1beta1.VirtualMachinePreferenceSpec{Devices: &v1beta1.DevicePreferences{PreferredDiskBus: virtv1.DiskBusVirtio}},
		}
	}
	cluster := instancetype.Cluster{LiveUpdate: true, LiveMigrate: true, MaxHotplugRatio: 4}
	wantVM, wantVMI := trimmedTyped(t)
	gotVM, gotVMI := readBack(t)
	for _, target := range []instancetype.Generation{gen(4, "8Gi"), gen(2, "4Gi"), gen(2, "32Gi")} {
		want := instancetype.Decide(instancetype.Input{VM: wantVM, VMI: wantVMI, Pinned: gen(2, "4Gi"), Target: target, Cluster: cluster})
		got := instancetype.Decide(instancetype.Input{VM: gotVM, VMI: gotVMI, Pinned: gen(2, "4Gi"), Target: target, Cluster: cluster})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("to %d vCPUs %s: stored objects planned\n%+v\ntrimmed typed ones\n%+v", target.Instancetype.CPU.Guest, &target.Instancetype.Memory.Guest, got, want)
		}
	}
}

// TestTrimUnreadSharesRepeatedStrings: two VMs (and two VMIs) decoded
// apart hold one copy of the strings a fleet repeats, and their own names.
func TestTrimUnreadSharesRepeatedStrings(t *testing.T) {
	vm := func(name string) *virtv1.VirtualMachine {
		v := served[virtv1.VirtualMachine](t, servedVM)
		v.Name = name
		if _, err := TrimUnread(v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	vmi := func() *virtv1.VirtualMachineInstance {
		v := served[virtv1.VirtualMachineInstance](t, servedVMI)
		if _, err := TrimUnread(v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	a, b := vm("web-1"), vm("web-2")
	ia, ib := vmi(), vmi()
	for what, pair := range map[string][2]string{
		"VMI phase":          {string(ia.Status.Phase), string(ib.Status.Phase)},
		"VMI condition type": {string(ia.Status.Conditions[1].Type), string(ib.Status.Conditions[1].Type)},
		"namespace":          {a.Namespace, b.Namespace},
		"finalizer":          {a.Finalizers[0], b.Finalizers[0]},
		"instance type":      {a.Spec.Instancetype.Name, b.Spec.Instancetype.Name},
		"pinned kind":        {a.Status.InstancetypeRef.Kind, b.Status.InstancetypeRef.Kind},
		"condition type":     {string(a.Status.Conditions[0].Type), string(b.Status.Conditions[0].Type)},
		"printable status":   {string(a.Status.PrintableStatus), string(b.Status.PrintableStatus)},
		"preference (spec)":  {a.Spec.Preference.Name, b.Spec.Preference.Name},
	} {
		if unsafe.StringData(pair[0]) != unsafe.StringData(pair[1]) {
			t.Errorf("%s %q: a copy per VM", what, pair[0])
		}
	}
	if a.Name != "web-1" || b.Name != "web-2" {
		t.Errorf("names: %q, %q", a.Name, b.Name)
	}
}

// TestStoredVMUndecodableTemplateIsReported: a stored template that does
// not decode is read as no template and reported, not dropped silently.
func TestStoredVMUndecodableTemplateIsReported(t *testing.T) {
	var reported []error
	saved := utilruntime.ErrorHandlers
	t.Cleanup(func() { utilruntime.ErrorHandlers = saved })
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(_ context.Context, err error, _ string, _ ...any) { reported = append(reported, err) }}
	s, err := storeVM(served[virtv1.VirtualMachine](t, servedVM))
	if err != nil {
		t.Fatal(err)
	}
	s.template = []byte(`{"spec":`)
	if vm := s.object(); vm.Spec.Template != nil || len(reported) != 1 || !strings.Contains(reported[0].Error(), "team-1/web-1") {
		t.Fatalf("template %v, reported %v", vm.Spec.Template, reported)
	}
}

// servedRevision is an instancetype ControllerRevision as the API server
// serves the one KubeVirt makes for web-1.
func servedRevision(t testing.TB) *appsv1.ControllerRevision {
	t.Helper()
	return served[appsv1.ControllerRevision](t, `{"metadata":{"name":"web-1-u1.medium-v1beta1-5c0e-1","namespace":"team-1","uid":"9a1f","resourceVersion":"77",
"creationTimestamp":"2026-12-03T03:00:00Z","labels":{"instancetype.kubevirt.io/object-kind":"VirtualMachineClusterInstancetype","instancetype.kubevirt.io/object-name":"u1.medium"},
"ownerReferences":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","name":"web-1","uid":"0b7d","controller":true,"blockOwnerDeletion":true}],
"managedFields":[{"manager":"virt-controller","operation":"Update","apiVersion":"apps/v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]},
"data":{"apiVersion":"instancetype.kubevirt.io/v1beta1","kind":"VirtualMachineClusterInstancetype","spec":{"cpu":{"guest":2},"memory":{"guest":"4Gi"}}},"revision":1}`)
}

// TestStoredRevisionReadsBackAsServed: a revision kept in its stored form
// reads back as the typed revision without its managed fields (and type
// meta), owner, times and snapshot included; one whose metadata holds
// more (finalizers, a second owner, a deletion under way, an owner without
// a kind) is kept typed, whole.
func TestStoredRevisionReadsBackAsServed(t *testing.T) {
	want := servedRevision(t)
	want.ManagedFields = nil
	stored, err := TrimUnread(servedRevision(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := stored.(*storedRevision); !ok {
		t.Fatalf("a revision is cached as %T", stored)
	}
	if again, err := TrimUnread(stored); err != nil || again != stored {
		t.Fatalf("a stored revision transformed again: %v, %T", err, again)
	}
	got := RevisionOf(stored)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("revision read back\n%+v\nwant\n%+v", got, want)
	}
	if m, _ := meta.Accessor(stored); !reflect.DeepEqual(m, &want.ObjectMeta) {
		t.Errorf("metadata for keys and handlers: %+v", m)
	}
	typed := servedRevision(t)
	typed.APIVersion, typed.Kind = "apps/v1", "ControllerRevision" // as a fake clientset leaves it
	if out, err := TrimUnread(typed); err != nil || !reflect.DeepEqual(RevisionOf(out), want) {
		t.Errorf("a revision with type meta is cached as %T: %v", out, err)
	}
	now := metav1.Now()
	for name, more := range map[string]func(*appsv1.ControllerRevision){
		"finalizers": func(cr *appsv1.ControllerRevision) { cr.Finalizers = []string{"example.com/hold"} },
		"second owner": func(cr *appsv1.ControllerRevision) {
			cr.OwnerReferences = append(cr.OwnerReferences, metav1.OwnerReference{Kind: "Other", Name: "x"})
		},
		"deletion":       func(cr *appsv1.ControllerRevision) { cr.DeletionTimestamp = &now },
		"kindless owner": func(cr *appsv1.ControllerRevision) { cr.OwnerReferences[0].Kind = "" },
	} {
		cr := servedRevision(t)
		more(cr)
		out, err := TrimUnread(cr)
		if err != nil {
			t.Fatal(err)
		}
		if RevisionOf(out) != cr {
			t.Errorf("a revision with %s is cached as %T, not whole", name, out)
		}
	}
}

// kvlivesRevision is the revision kvlive creates to move web-1's pin on
// from generation gen-1 to gen of its instance type (servedRevision is
// generation 1's): labelled as kvlive's and naming the one it supersedes.
func kvlivesRevision(t testing.TB, gen int) *appsv1.ControllerRevision {
	t.Helper()
	cr := servedRevision(t)
	nameOf := func(gen int) string { return strings.TrimSuffix(cr.Name, "-1") + "-" + strconv.Itoa(gen) }
	cr.Name, cr.UID = nameOf(gen), types.UID("9a1f-"+strconv.Itoa(gen))
	return instancetype.Kvlives(cr, nameOf(gen-1))
}

// TestStoredRevisionKeepsKvlivesAnnotationWithoutAMap: a revision kvlive
// created, whose one annotation names the revision it superseded (a name
// no other revision's annotation shares), is kept in its stored form and
// reads back as served; that annotation is kept as a string, not in a map
// of its own, and is not offered for sharing (each would only have filled
// the pool of shared maps). A revision annotated otherwise too, or
// otherwise only, reads back as served as well.
func TestStoredRevisionKeepsKvlivesAnnotationWithoutAMap(t *testing.T) {
	const superseded = "web-1-u1.medium-v1beta1-5c0e-1"
	note := map[string]string{"example.com/note": "x"}
	for name, c := range map[string]struct {
		annotations map[string]string
		// what the stored form keeps: kvlive's apart, and the others
		supersedes string
		others     map[string]string
	}{
		"kvlive's alone":       {map[string]string{instancetype.SupersedesAnnotation: superseded}, superseded, nil},
		"kvlive's and another": {map[string]string{instancetype.SupersedesAnnotation: superseded, "example.com/note": "x"}, superseded, note},
		"another alone":        {note, "", note},
		"kvlive's, left empty": {map[string]string{instancetype.SupersedesAnnotation: ""}, "", map[string]string{instancetype.SupersedesAnnotation: ""}},
	} {
		served := func() *appsv1.ControllerRevision {
			cr := kvlivesRevision(t, 2)
			cr.Annotations = maps.Clone(c.annotations)
			return cr
		}
		want := served()
		want.ManagedFields = nil
		stored, err := TrimUnread(served())
		if err != nil {
			t.Fatal(err)
		}
		s, ok := stored.(*storedRevision)
		if !ok {
			t.Fatalf("%s: the revision is cached as %T", name, stored)
		}
		if s.supersedes != c.supersedes || !maps.Equal(s.annotations, c.others) || (s.annotations == nil) != (c.others == nil) {
			t.Errorf("%s: kept the annotations as %q and %v", name, s.supersedes, s.annotations)
		}
		if got := RevisionOf(stored); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: revision read back\n%+v\nwant\n%+v", name, got, want)
		}
		if m, _ := meta.Accessor(stored); !reflect.DeepEqual(m, &want.ObjectMeta) {
			t.Errorf("%s: metadata for keys and handlers: %+v", name, m)
		}
	}
	sharedMaps.Lock()
	before := len(sharedMaps.pool)
	sharedMaps.Unlock()
	for gen := range 100 {
		if _, err := TrimUnread(kvlivesRevision(t, gen+3)); err != nil {
			t.Fatal(err)
		}
	}
	sharedMaps.Lock()
	after := len(sharedMaps.pool)
	sharedMaps.Unlock()
	if after != before {
		t.Errorf("100 revisions kvlive created took the pool of shared maps from %d to %d", before, after)
	}
}

// TestVMsWithoutTemplatesDecodesNone: the fleet read a metrics scrape
// makes yields each VM of the namespace and selector asked, without its
// template, and decodes none (a template that does not decode is not
// even reported).
func TestVMsWithoutTemplatesDecodesNone(t *testing.T) {
	var reported []error
	saved := utilruntime.ErrorHandlers
	t.Cleanup(func() { utilruntime.ErrorHandlers = saved })
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(_ context.Context, err error, _ string, _ ...any) { reported = append(reported, err) }}
	c, err := CacheOf()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web-1", "web-2", "db-1"} {
		vm := served[virtv1.VirtualMachine](t, strings.ReplaceAll(servedVM, "web-1", name))
		if name == "db-1" {
			vm.Labels = map[string]string{"tier": "db"}
		}
		s, err := storeVM(vm)
		if err != nil {
			t.Fatal(err)
		}
		s.template = []byte(`{"spec":`) // decoding it would be reported
		if err := c.vms.GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for vm := range c.VMsWithoutTemplates("team-1", labels.SelectorFromSet(labels.Set{"tier": "web"})) {
		if vm.Spec.Template != nil || vm.Status.InstancetypeRef == nil {
			t.Errorf("%s: template %v, pin %v", vm.Name, vm.Spec.Template, vm.Status.InstancetypeRef)
		}
		got = append(got, vm.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"web-1", "web-2"}) || len(reported) > 0 {
		t.Errorf("yielded %v, reported %v", got, reported)
	}
	for range c.VMsWithoutTemplates("", nil) {
		break // a reader that stops early stops the iteration
	}
}

// TestAFleetScanAllocatesNoVMApiece: a scan of the fleet (a metrics
// scrape's drift, at every scrape) reads each VM into the same struct,
// each VM's own references and pin included, so its allocations do not
// grow with the VMs; a VM apiece was some 700 bytes in 4 allocations
// (BenchmarkMeasure), 70 MB of garbage a scan at 100,000 VMs. The labels
// of a pinned revision and the status of a VM's VMI are read where they
// are stored.
func TestAFleetScanAllocatesNoVMApiece(t *testing.T) {
	const vms = 200
	c, err := CacheOf()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := range vms {
		vm := served[virtv1.VirtualMachine](t, strings.ReplaceAll(servedVM, "web-1", fmt.Sprintf("web-%d", i)))
		want[vm.Name] = vm.Status.InstancetypeRef.ControllerRevisionRef.Name
		s, err := storeVM(vm)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.vms.GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	scan := func() map[string]string {
		pins := make(map[string]string, vms)
		for vm := range c.VMsWithoutTemplates("", nil) {
			if vm.Spec.Instancetype == nil || vm.Status.InstancetypeRef == nil || vm.Status.InstancetypeRef.ControllerRevisionRef == nil {
				t.Fatalf("%s read without its reference or pin: %+v", vm.Name, vm.Spec)
			}
			pins[vm.Name] = vm.Status.InstancetypeRef.ControllerRevisionRef.Name
		}
		return pins
	}
	if pins := scan(); !maps.Equal(pins, want) {
		t.Fatalf("the scan read the pins %v, want %v", pins, want)
	}
	sink := make(map[string]string, vms)
	allocs := testing.AllocsPerRun(10, func() {
		for vm := range c.VMsWithoutTemplates("", nil) {
			readPin(sink, vm)
		}
	})
	if allocs > vms/10 {
		t.Errorf("a scan of %d VMs made %.0f allocations; want a few, not some for each VM", vms, allocs)
	}

	rev := servedRevision(t)
	labels := maps.Clone(rev.Labels)
	if err := c.revisions.GetIndexer().Add(storeRevision(rev)); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.RevisionLabels(rev.Namespace, rev.Name); !ok || !maps.Equal(got, labels) {
		t.Errorf("RevisionLabels = %v, %v; want %v", got, ok, labels)
	}
	if _, ok := c.RevisionLabels(rev.Namespace, "gone"); ok {
		t.Error("RevisionLabels found a revision the cache does not hold")
	}
}

// readPin keeps vm's pin in sink. Called through a variable, the VM
// escapes as far as the compiler can tell, as it does in drift.Measure: a
// reader it could see through would let it keep a VM built for each read
// on the stack, and the scan would look cheap whatever it built.
var readPin = func(sink map[string]string, vm *virtv1.VirtualMachine) {
	sink[vm.Name] = vm.Status.InstancetypeRef.ControllerRevisionRef.Name
}

// TestStoredVMFitsItsSizeClass: a stored VM is allocated in the 576-byte
// size class; a field more would take it to 640, 64 bytes a VM.
func TestStoredVMFitsItsSizeClass(t *testing.T) {
	if size := unsafe.Sizeof(storedVM{}); size > 576 {
		t.Errorf("storedVM is %d bytes, past the allocator's 576-byte size class", size)
	}
}
