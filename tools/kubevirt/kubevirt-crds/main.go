// Command kubevirt-crds writes every CustomResourceDefinition virt-operator
// installs, as KubeVirt's own generators render them, to stdout as a YAML
// stream: the VM, VMI and instancetype schemas kvlive's integration tests run
// KubeVirt's virt-controller against, and every kind the controller informs
// on (it waits for all of their caches before it leads).
package main

import (
	"fmt"
	"os"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

// generators are the New*Crd functions virt-operator's install strategy calls
// (pkg/virt-operator/resource/generate/install), plus the KubeVirt CR's.
var generators = []func() (*extv1.CustomResourceDefinition, error){
	components.NewKubeVirtCrd,
	components.NewVirtualMachineInstanceCrd,
	components.NewPresetCrd,
	components.NewReplicaSetCrd,
	components.NewVirtualMachineCrd,
	components.NewVirtualMachineInstanceMigrationCrd,
	components.NewVirtualMachineSnapshotCrd,
	components.NewVirtualMachineSnapshotContentCrd,
	components.NewVirtualMachineRestoreCrd,
	components.NewVirtualMachineInstancetypeCrd,
	components.NewVirtualMachineClusterInstancetypeCrd,
	components.NewVirtualMachinePoolCrd,
	components.NewMigrationPolicyCrd,
	components.NewVirtualMachinePreferenceCrd,
	components.NewVirtualMachineClusterPreferenceCrd,
	components.NewVirtualMachineExportCrd,
	components.NewVirtualMachineCloneCrd,
	components.NewVirtualMachineBackupCrd,
	components.NewVirtualMachineBackupTrackerCrd,
	components.NewPluginCrd,
}

func main() {
	for _, generate := range generators {
		crd, err := generate()
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubevirt-crds:", err)
			os.Exit(1)
		}
		crd.TypeMeta.APIVersion = "apiextensions.k8s.io/v1"
		crd.TypeMeta.Kind = "CustomResourceDefinition"
		out, err := yaml.Marshal(crd)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kubevirt-crds: %s: %v\n", crd.Name, err)
			os.Exit(1)
		}
		fmt.Printf("---\n%s", out)
	}
}
