package events

import (
	"fmt"
	"strings"
)

// The instancetype.kubevirt.io kinds kvlive watches, spelled as their Kind.
const (
	KindInstancetype        = "VirtualMachineInstancetype"
	KindClusterInstancetype = "VirtualMachineClusterInstancetype"
	KindPreference          = "VirtualMachinePreference"
	KindClusterPreference   = "VirtualMachineClusterPreference"
)

// clusterScopeToken stands for the namespace of cluster-scoped objects in
// index keys, where an empty token would be ambiguous.
const clusterScopeToken = "_"

// Ref names one instance type or preference object.
type Ref struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// IsPreference reports whether the ref names a preference kind.
func (r Ref) IsPreference() bool {
	return r.Kind == KindPreference || r.Kind == KindClusterPreference
}

// IsClusterScoped reports whether the ref names a cluster-scoped kind.
func (r Ref) IsClusterScoped() bool {
	return r.Kind == KindClusterInstancetype || r.Kind == KindClusterPreference
}

// Key is the index key `<kind>/<namespace|_>/<name>` the planner files VMs
// under; cluster-scoped kinds use `_` for the namespace.
func (r Ref) Key() string {
	ns := r.Namespace
	if r.IsClusterScoped() || ns == "" {
		ns = clusterScopeToken
	}
	return r.Kind + "/" + ns + "/" + r.Name
}

// String renders the ref the way kubectl users write it: `kind/[ns/]name`
// with the short lower-case kind.
func (r Ref) String() string {
	short := shortKinds[r.Kind]
	if short == "" {
		short = r.Kind
	}
	if r.IsClusterScoped() || r.Namespace == "" {
		return short + "/" + r.Name
	}
	return short + "/" + r.Namespace + "/" + r.Name
}

var shortKinds = map[string]string{
	KindInstancetype:        "instancetype",
	KindClusterInstancetype: "clusterinstancetype",
	KindPreference:          "preference",
	KindClusterPreference:   "clusterpreference",
}

// kindAliases maps every spelling KubeVirt accepts in a VM's matcher (and
// the short names kvlive's CLI takes) to the canonical Kind.
var kindAliases = map[string]string{
	"":                                   KindClusterInstancetype,
	"virtualmachineinstancetype":         KindInstancetype,
	"virtualmachineinstancetypes":        KindInstancetype,
	"instancetype":                       KindInstancetype,
	"vminstancetype":                     KindInstancetype,
	"virtualmachineclusterinstancetype":  KindClusterInstancetype,
	"virtualmachineclusterinstancetypes": KindClusterInstancetype,
	"clusterinstancetype":                KindClusterInstancetype,
	"vmclusterinstancetype":              KindClusterInstancetype,
	"virtualmachinepreference":           KindPreference,
	"virtualmachinepreferences":          KindPreference,
	"preference":                         KindPreference,
	"vmpreference":                       KindPreference,
	"virtualmachineclusterpreference":    KindClusterPreference,
	"virtualmachineclusterpreferences":   KindClusterPreference,
	"clusterpreference":                  KindClusterPreference,
	"vmclusterpreference":                KindClusterPreference,
}

// NormalizeKind returns the canonical Kind for a matcher or CLI spelling.
// preference says which family an empty kind defaults to: KubeVirt reads an
// empty matcher kind as the cluster-scoped kind of that family.
func NormalizeKind(kind string, preference bool) (string, error) {
	lower := strings.ToLower(kind)
	if lower == "" && preference {
		return KindClusterPreference, nil
	}
	k, ok := kindAliases[lower]
	if !ok {
		return "", fmt.Errorf("unknown instancetype or preference kind %q", kind)
	}
	return k, nil
}

// ParseRef parses `KIND/NAME` or `KIND/NAMESPACE/NAME` as written on the
// command line. A namespaced kind without a namespace takes defaultNamespace.
func ParseRef(s, defaultNamespace string) (Ref, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return Ref{}, fmt.Errorf("reference %q: want KIND/NAME or KIND/NAMESPACE/NAME", s)
	}
	kind, err := NormalizeKind(parts[0], false)
	if err != nil || parts[0] == "" {
		return Ref{}, fmt.Errorf("reference %q: unknown kind %q", s, parts[0])
	}
	r := Ref{Kind: kind, Name: parts[len(parts)-1]}
	if len(parts) == 3 {
		r.Namespace = parts[1]
	}
	if r.IsClusterScoped() {
		if len(parts) == 3 {
			return Ref{}, fmt.Errorf("reference %q: %s is cluster-scoped and takes no namespace", s, kind)
		}
	} else if r.Namespace == "" {
		r.Namespace = defaultNamespace
	}
	if r.Name == "" || (!r.IsClusterScoped() && r.Namespace == "") {
		return Ref{}, fmt.Errorf("reference %q: empty name or namespace", s)
	}
	return r, nil
}
