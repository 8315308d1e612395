package offline

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"kvlive/internal/kube"
)

// newObject maps the apiVersion/kind pairs an offline file may hold to
// their Go types.
func newObject(tm metav1.TypeMeta) (runtime.Object, bool, error) {
	switch tm.APIVersion + "/" + tm.Kind {
	case "kubevirt.io/v1/VirtualMachine":
		return &virtv1.VirtualMachine{}, true, nil
	case "kubevirt.io/v1/VirtualMachineInstance":
		return &virtv1.VirtualMachineInstance{}, true, nil
	case "kubevirt.io/v1/KubeVirt":
		return &virtv1.KubeVirt{}, true, nil
	case "instancetype.kubevirt.io/v1beta1/VirtualMachineInstancetype":
		return &v1beta1.VirtualMachineInstancetype{}, true, nil
	case "instancetype.kubevirt.io/v1beta1/VirtualMachineClusterInstancetype":
		return &v1beta1.VirtualMachineClusterInstancetype{}, true, nil
	case "instancetype.kubevirt.io/v1beta1/VirtualMachinePreference":
		return &v1beta1.VirtualMachinePreference{}, true, nil
	case "instancetype.kubevirt.io/v1beta1/VirtualMachineClusterPreference":
		return &v1beta1.VirtualMachineClusterPreference{}, true, nil
	case "apps/v1/ControllerRevision":
		return &appsv1.ControllerRevision{}, false, nil
	}
	return nil, false, fmt.Errorf("unsupported object %s %s: an offline file holds VMs, VMIs, instance types, preferences, ControllerRevisions and the KubeVirt CR", tm.APIVersion, tm.Kind)
}

// Load reads a multi-document YAML (or JSON) file of cluster objects into
// fake clientsets, strictly: a misspelt field is an error, not a silent default.
func Load(r io.Reader) (kube.Clients, error) {
	var kubeObjs, virtObjs []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return kube.Clients{}, fmt.Errorf("document %d: %w", doc, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(raw, &tm); err != nil {
			return kube.Clients{}, fmt.Errorf("document %d: %w", doc, err)
		}
		if tm.Kind == "" && tm.APIVersion == "" {
			continue // an empty document, e.g. after a trailing ---
		}
		obj, virt, err := newObject(tm)
		if err != nil {
			return kube.Clients{}, fmt.Errorf("document %d: %w", doc, err)
		}
		if err := decodeStrict(raw, obj); err != nil {
			return kube.Clients{}, fmt.Errorf("document %d (%s): %w", doc, tm.Kind, err)
		}
		if virt {
			virtObjs = append(virtObjs, obj)
		} else {
			kubeObjs = append(kubeObjs, obj)
		}
	}
	return kube.NewInMemory(kubeObjs, virtObjs...), nil
}

// decodeStrict decodes like the API server does: case-sensitive field names,
// and an unknown or duplicate field is an error.
func decodeStrict(raw []byte, obj runtime.Object) error {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}
