package instancetype

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"

	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
)

// A preference is a set of defaults: each preferred value reaches the VM only
// where the VM's template leaves that field empty (pkg/instancetype/preference/apply),
// and virt-api fills several fields on every VM (machine type, architecture),
// so most preferred values of a real VM reach nothing. kvlive therefore
// compares what a preference does to the VM's template, not the preference
// specs: applyPreference below follows KubeVirt v1.9.0's rules field by
// field, and preferenceEffect keeps the template fields it set.

// preferenceEffect returns the template fields p sets on spec, flattened to
// "path" → canonical JSON (e.g. "domain.machine.type" → `"q35"`).
func preferenceEffect(spec *virtv1.VirtualMachineInstanceSpec, p *v1beta1.VirtualMachinePreferenceSpec) map[string]string {
	before := spec.DeepCopy()
	if before.Domain.CPU == nil {
		// The instance type's apply creates it before preferences run.
		before.Domain.CPU = &virtv1.CPU{}
	}
	after := before.DeepCopy()
	applyPreference(p, after)
	a, b := map[string]string{}, map[string]string{}
	flattenJSON("", before, a)
	flattenJSON("", after, b)
	out := map[string]string{}
	for k, v := range b {
		if a[k] != v {
			out[k] = v
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			out[k] = "null"
		}
	}
	return out
}

// flattenJSON writes every leaf of obj's JSON as path → canonical JSON;
// list items are indexed ("domain.devices.disks[0].disk.bus").
func flattenJSON(prefix string, obj any, out map[string]string) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return
	}
	flattenValue(prefix, v, out)
}

func flattenValue(path string, v any, out map[string]string) {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 {
			out[path] = "{}"
		}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flattenValue(p, t[k], out)
		}
	case []any:
		if len(t) == 0 {
			out[path] = "[]"
		}
		for i, item := range t {
			flattenValue(path+"["+strconv.Itoa(i)+"]", item, out)
		}
	default:
		b, _ := json.Marshal(t)
		out[path] = string(b)
	}
}

// applyPreference sets p's preferred values on spec where spec leaves them
// empty, in the order KubeVirt applies them (preference/apply/vmi.go Apply).
// Annotations go to the VMI's metadata and are handled apart.
func applyPreference(p *v1beta1.VirtualMachinePreferenceSpec, spec *virtv1.VirtualMachineInstanceSpec) {
	if p == nil {
		return
	}
	preferCPUFeatures(p, spec)
	preferDevices(p, spec)
	preferFeatures(p, spec)
	preferFirmware(p, spec)
	if m := p.Machine; m != nil && m.PreferredMachineType != "" {
		if spec.Domain.Machine == nil {
			spec.Domain.Machine = &virtv1.Machine{}
		}
		setIfEmpty(&spec.Domain.Machine.Type, m.PreferredMachineType)
	}
	preferClock(p, spec)
	if p.PreferredSubdomain != nil {
		setIfEmpty(&spec.Subdomain, *p.PreferredSubdomain)
	}
	if p.PreferredTerminationGracePeriodSeconds != nil && spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptrTo(*p.PreferredTerminationGracePeriodSeconds)
	}
	if p.PreferredArchitecture != nil {
		setIfEmpty(&spec.Architecture, *p.PreferredArchitecture)
	}
	if p.PreferredLaunchSecurity != nil && spec.Domain.LaunchSecurity == nil {
		spec.Domain.LaunchSecurity = p.PreferredLaunchSecurity.DeepCopy()
	}
}

// preferCPUFeatures adds preferred CPU features the template does not name
// (preference/apply/cpu.go).
func preferCPUFeatures(p *v1beta1.VirtualMachinePreferenceSpec, spec *virtv1.VirtualMachineInstanceSpec) {
	if p.CPU == nil {
		return
	}
	for _, f := range p.CPU.PreferredCPUFeatures {
		named := slices.ContainsFunc(spec.Domain.CPU.Features, func(g virtv1.CPUFeature) bool { return g.Name == f.Name })
		if !named {
			spec.Domain.CPU.Features = append(spec.Domain.CPU.Features, f)
		}
	}
}

// preferDevices follows preference/apply/device.go, disk.go and interface.go.
func preferDevices(p *v1beta1.VirtualMachinePreferenceSpec, spec *virtv1.VirtualMachineInstanceSpec) {
	d := p.Devices
	if d == nil {
		return
	}
	dev := &spec.Domain.Devices
	setPtrIfNil(&dev.UseVirtioTransitional, d.PreferredUseVirtioTransitional)
	setPtrIfNil(&dev.BlockMultiQueue, d.PreferredBlockMultiQueue)
	setPtrIfNil(&dev.NetworkInterfaceMultiQueue, d.PreferredNetworkInterfaceMultiQueue)
	if d.PreferredDisableHotplug != nil {
		dev.DisableHotplug = *d.PreferredDisableHotplug
	}
	if d.PreferredSoundModel != "" && dev.Sound != nil {
		setIfEmpty(&dev.Sound.Model, d.PreferredSoundModel)
	}
	if d.PreferredRng != nil && dev.Rng == nil {
		dev.Rng = d.PreferredRng.DeepCopy()
	}
	if d.PreferredTPM != nil && dev.TPM == nil {
		dev.TPM = d.PreferredTPM.DeepCopy()
	}
	if d.PreferredVideoType != nil {
		if dev.Video == nil {
			dev.Video = &virtv1.VideoDevice{}
		}
		setIfEmpty(&dev.Video.Type, *d.PreferredVideoType)
	}
	setPtrIfNil(&dev.AutoattachGraphicsDevice, d.PreferredAutoattachGraphicsDevice)
	setPtrIfNil(&dev.AutoattachMemBalloon, d.PreferredAutoattachMemBalloon)
	setPtrIfNil(&dev.AutoattachPodInterface, d.PreferredAutoattachPodInterface)
	setPtrIfNil(&dev.AutoattachSerialConsole, d.PreferredAutoattachSerialConsole)
	setPtrIfNil(&dev.AutoattachInputDevice, d.PreferredAutoattachInputDevice)
	for i := range dev.Disks {
		preferDisk(d, &dev.Disks[i])
	}
	for i := range dev.Interfaces {
		iface := &dev.Interfaces[i]
		setIfEmpty(&iface.Model, d.PreferredInterfaceModel)
		if d.PreferredInterfaceMasquerade != nil && bindingUnset(iface) && onPodNetwork(iface.Name, spec) {
			iface.Masquerade = d.PreferredInterfaceMasquerade.DeepCopy()
		}
	}
	for i := range dev.Inputs {
		setIfEmpty(&dev.Inputs[i].Bus, d.PreferredInputBus)
		setIfEmpty(&dev.Inputs[i].Type, d.PreferredInputType)
	}
	if d.PreferredPanicDeviceModel != nil {
		if len(dev.PanicDevices) == 0 {
			dev.PanicDevices = []virtv1.PanicDevice{{Model: d.PreferredPanicDeviceModel}}
		}
		for i := range dev.PanicDevices {
			if dev.PanicDevices[i].Model == nil {
				dev.PanicDevices[i].Model = d.PreferredPanicDeviceModel
			}
		}
	}
}

func preferDisk(d *v1beta1.DevicePreferences, disk *virtv1.Disk) {
	dd := &disk.DiskDevice
	if dd.Disk == nil && dd.CDRom == nil && dd.LUN == nil {
		dd.Disk = &virtv1.DiskTarget{}
	}
	switch {
	case dd.Disk != nil:
		setIfEmpty(&dd.Disk.Bus, d.PreferredDiskBus)
		if d.PreferredDiskBlockSize != nil && disk.BlockSize == nil {
			disk.BlockSize = d.PreferredDiskBlockSize.DeepCopy()
		}
		setIfEmpty(&disk.Cache, d.PreferredDiskCache)
		setIfEmpty(&disk.IO, d.PreferredDiskIO)
		if dd.Disk.Bus == virtv1.DiskBusVirtio {
			setPtrIfNil(&disk.DedicatedIOThread, d.PreferredDiskDedicatedIoThread)
		}
	case dd.CDRom != nil:
		setIfEmpty(&dd.CDRom.Bus, d.PreferredCdromBus)
	case dd.LUN != nil:
		setIfEmpty(&dd.LUN.Bus, d.PreferredLunBus)
	}
}

func bindingUnset(iface *virtv1.Interface) bool {
	return reflect.ValueOf(iface.InterfaceBindingMethod).IsZero() && iface.Binding == nil
}

func onPodNetwork(name string, spec *virtv1.VirtualMachineInstanceSpec) bool {
	for _, n := range spec.Networks {
		if n.Name == name {
			return n.Pod != nil
		}
	}
	return false
}

// preferFeatures follows preference/apply/features.go: ACPI is the one
// preferred value that overrides the template.
func preferFeatures(p *v1beta1.VirtualMachinePreferenceSpec, spec *virtv1.VirtualMachineInstanceSpec) {
	f := p.Features
	if f == nil {
		return
	}
	if spec.Domain.Features == nil {
		spec.Domain.Features = &virtv1.Features{}
	}
	vf := spec.Domain.Features
	if f.PreferredAcpi != nil {
		vf.ACPI = *f.PreferredAcpi.DeepCopy()
	}
	if f.PreferredApic != nil && vf.APIC == nil {
		vf.APIC = f.PreferredApic.DeepCopy()
	}
	if h := f.PreferredHyperv; h != nil {
		if vf.Hyperv == nil {
			vf.Hyperv = &virtv1.FeatureHyperv{}
		}
		// Every Hyper-V enlightenment is a pointer field: each preferred one
		// fills the template's where it is nil.
		fillNilFields(reflect.ValueOf(vf.Hyperv).Elem(), reflect.ValueOf(h).Elem())
	}
	if f.PreferredKvm != nil && vf.KVM == nil {
		vf.KVM = f.PreferredKvm.DeepCopy()
	}
	if f.PreferredPvspinlock != nil && vf.Pvspinlock == nil {
		vf.Pvspinlock = f.PreferredPvspinlock.DeepCopy()
	}
	if f.PreferredSmm != nil && vf.SMM == nil {
		vf.SMM = f.PreferredSmm.DeepCopy()
	}
}

// fillNilFields copies each non-nil pointer field of from into the same
// field of to where that is nil.
func fillNilFields(to, from reflect.Value) {
	for i := range to.NumField() {
		t, f := to.Field(i), from.Field(i)
		if t.Kind() == reflect.Pointer && t.IsNil() && !f.IsNil() {
			c := reflect.New(f.Elem().Type())
			c.Elem().Set(f.Elem())
			t.Set(c)
		}
	}
}

// preferFirmware follows preference/apply/firmware.go.
func preferFirmware(p *v1beta1.VirtualMachinePreferenceSpec, spec *virtv1.VirtualMachineInstanceSpec) {
	f := p.Firmware
	if f == nil {
		return
	}
	if spec.Domain.Firmware == nil {
		spec.Domain.Firmware = &virtv1.Firmware{}
	}
	fw := spec.Domain.Firmware
	if fw.Bootloader == nil {
		fw.Bootloader = &virtv1.Bootloader{}
	}
	bl := fw.Bootloader
	if f.PreferredUseBios != nil && *f.PreferredUseBios && bl.BIOS == nil && bl.EFI == nil {
		bl.BIOS = &virtv1.BIOS{}
	}
	if f.PreferredUseBiosSerial != nil && bl.BIOS != nil && bl.BIOS.UseSerial == nil {
		bl.BIOS.UseSerial = ptrTo(*f.PreferredUseBiosSerial)
	}
	if bl.EFI == nil && bl.BIOS == nil && f.PreferredEfi != nil {
		bl.EFI = f.PreferredEfi.DeepCopy()
		return
	}
	if f.DeprecatedPreferredUseEfi != nil && *f.DeprecatedPreferredUseEfi && bl.EFI == nil && bl.BIOS == nil {
		bl.EFI = &virtv1.EFI{}
	}
	if f.DeprecatedPreferredUseSecureBoot != nil && bl.EFI != nil && bl.EFI.SecureBoot == nil {
		bl.EFI.SecureBoot = ptrTo(*f.DeprecatedPreferredUseSecureBoot)
	}
}

// preferClock follows preference/apply/clock.go.
func preferClock(p *v1beta1.VirtualMachinePreferenceSpec, spec *virtv1.VirtualMachineInstanceSpec) {
	c := p.Clock
	if c == nil {
		return
	}
	if spec.Domain.Clock == nil {
		spec.Domain.Clock = &virtv1.Clock{}
	}
	vc := spec.Domain.Clock
	if c.PreferredClockOffset != nil && vc.UTC == nil && vc.Timezone == nil {
		vc.ClockOffset = *c.PreferredClockOffset.DeepCopy()
	}
	if c.PreferredTimer != nil && vc.Timer == nil {
		vc.Timer = c.PreferredTimer.DeepCopy()
	}
}

func setIfEmpty[T comparable](field *T, preferred T) {
	var zero T
	if *field == zero && preferred != zero {
		*field = preferred
	}
}

func setPtrIfNil[T any](field **T, preferred *T) {
	if *field == nil && preferred != nil {
		*field = ptrTo(*preferred)
	}
}

func ptrTo[T any](v T) *T { return &v }
