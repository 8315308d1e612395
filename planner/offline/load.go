package offline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"kvlive/internal/kube"
)

// newObject maps the apiVersion/kind pairs an offline file may hold to
// their Go types.
func newObject(tm metav1.TypeMeta) (runtime.Object, error) {
	switch tm.APIVersion + "/" + tm.Kind {
	case "kubevirt.io/v1/VirtualMachine":
		return &virtv1.VirtualMachine{}, nil
	case "kubevirt.io/v1/VirtualMachineInstance":
		return &virtv1.VirtualMachineInstance{}, nil
	case "kubevirt.io/v1/KubeVirt":
		return &virtv1.KubeVirt{}, nil
	case "instancetype.kubevirt.io/v1beta1/VirtualMachineInstancetype":
		return &v1beta1.VirtualMachineInstancetype{}, nil
	case "instancetype.kubevirt.io/v1beta1/VirtualMachineClusterInstancetype":
		return &v1beta1.VirtualMachineClusterInstancetype{}, nil
	case "instancetype.kubevirt.io/v1beta1/VirtualMachinePreference":
		return &v1beta1.VirtualMachinePreference{}, nil
	case "instancetype.kubevirt.io/v1beta1/VirtualMachineClusterPreference":
		return &v1beta1.VirtualMachineClusterPreference{}, nil
	case "apps/v1/ControllerRevision":
		return &appsv1.ControllerRevision{}, nil
	}
	return nil, fmt.Errorf("unsupported object %s %s: an offline file holds VMs, VMIs, instance types, preferences, ControllerRevisions and the KubeVirt CR", tm.APIVersion, tm.Kind)
}

// MaxInput bounds an offline file: more is refused with an error rather
// than read into memory without end (-f /dev/zero).
const MaxInput = 64 << 20

// errTooLarge is returned once more than MaxInput bytes were read.
var errTooLarge = fmt.Errorf("input larger than %d MiB: an offline file is a cluster's objects, not a stream", MaxInput>>20)

// boundedReader reads at most MaxInput bytes and stops when ctx ends.
type boundedReader struct {
	ctx context.Context
	r   io.Reader
	n   int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if b.n > MaxInput {
		return 0, errTooLarge
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > MaxInput {
		return n, errTooLarge
	}
	return n, err
}

// Load reads a multi-document YAML (or JSON) file of cluster objects into a
// cache planning reads (no client, nothing listed or watched), and checks it as the API server would: a misspelt field,
// a document without kind and apiVersion, an invalid name, the same object
// twice, an instance type without vCPUs or memory are errors naming the
// document. It reads at most MaxInput bytes and stops when ctx ends.
func Load(ctx context.Context, r io.Reader) (*kube.Cache, error) {
	var objs []runtime.Object
	seen := map[string]int{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(&boundedReader{ctx: ctx, r: r}))
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(raw, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if tm.Kind == "" && tm.APIVersion == "" {
			if empty(raw) {
				continue // an empty document, e.g. after a trailing ---
			}
			return nil, fmt.Errorf("document %d: kind and apiVersion are required", doc)
		}
		obj, err := newObject(tm)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if err := decodeStrict(raw, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", doc, tm.Kind, err)
		}
		m := obj.(metav1.Object)
		key := tm.Kind + "/" + m.GetNamespace() + "/" + m.GetName()
		if first, dup := seen[key]; dup {
			return nil, fmt.Errorf("document %d (%s %s): the same object as document %d", doc, tm.Kind, m.GetName(), first)
		}
		seen[key] = doc
		if err := validate(obj); err != nil {
			return nil, fmt.Errorf("document %d (%s %s): %w", doc, tm.Kind, m.GetName(), err)
		}
		objs = append(objs, obj)
	}
	return kube.CacheOf(objs...)
}

// empty reports whether a document holds only whitespace and comments.
func empty(raw []byte) bool {
	for _, line := range strings.Split(string(raw), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") && t != "---" {
			return false
		}
	}
	return true
}

// validate checks what the API server or KubeVirt's webhooks would refuse:
// names, and instance types without vCPUs or memory.
func validate(obj runtime.Object) error {
	m := obj.(metav1.Object)
	if errs := validation.IsDNS1123Subdomain(m.GetName()); len(errs) > 0 {
		return fmt.Errorf("metadata.name %q: %s", m.GetName(), strings.Join(errs, "; "))
	}
	if ns := m.GetNamespace(); ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("metadata.namespace %q: %s", ns, strings.Join(errs, "; "))
		}
	}
	var spec *v1beta1.VirtualMachineInstancetypeSpec
	switch o := obj.(type) {
	case *v1beta1.VirtualMachineInstancetype:
		spec = &o.Spec
	case *v1beta1.VirtualMachineClusterInstancetype:
		spec = &o.Spec
	}
	if spec != nil {
		if spec.CPU.Guest < 1 {
			return fmt.Errorf("spec.cpu.guest %d: want at least 1 vCPU", spec.CPU.Guest)
		}
		if spec.Memory.Guest.Sign() <= 0 {
			return fmt.Errorf("spec.memory.guest %s: want a positive quantity", spec.Memory.Guest.String())
		}
	}
	return nil
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
