//go:build integration

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"kvlive/internal/testenv"
)

// TestShippedManifestsAreEnough installs deploy/kvlive on the API server
// (every object must pass its validation), then runs kvlive with a token of
// the manifests' ServiceAccount, so with exactly the shipped ClusterRole,
// through an edit and a switch, with leader election on (its Role). A verb missing from the role shows up as a
// failed outcome, a VM left behind or a "forbidden" in kvlive's log.
func TestShippedManifestsAreEnough(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 40}})
	sa := e.installManifests(filepath.Join(testenv.RepoRoot(t), "deploy", "kvlive"))
	e.kubeconfig = e.serviceAccountKubeconfig(sa)
	e.checkFlowSchema(e.kubeconfig, "kvlive")
	proc := e.runKvlive("all stages, as the shipped ServiceAccount", "--leader-elect", "--leader-elect-resource-namespace", sa.Namespace)
	e.waitFor("kvlive to hold the watcher's Lease", time.Minute, func() (bool, string) {
		l, err := e.clients.Kube.CoordinationV1().Leases(sa.Namespace).Get(e.ctx, "kvlive-watcher", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", fmt.Sprint(err)
	})
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})
	e.waitSettled("every edited VM pinned to the new generation", edited, func(v clusterView, s vmShape) string {
		return pinProblem(v, s, it)
	})

	out := e.kvliveCommand(rolloutTimeout, "switch", "--nats-url", e.nats.URL, "--kubeconfig", e.kubeconfig, "-A",
		"--from", "clusterinstancetype/"+itMedium, "--to", "clusterinstancetype/"+itLarge, "-l", "tier=web", "--wait")
	m := switchOutput.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kvlive switch printed %q", out)
	}
	web := e.selectShapes(func(s vmShape) bool { return s.instancetype == itMedium && s.tier == "web" })
	e.checkRollout(e.follow(m[1]), rolloutWant{eventID: m[1], shapes: web, action: vmShape.expected, clean: true})
	large := e.instancetype(itLarge)
	e.waitSettled("web VMs switched to "+itLarge, web, func(v clusterView, s vmShape) string {
		return pinProblem(v, s, large)
	})
	if log := proc.out.String(); strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("kvlive was refused something with the shipped RBAC:\n%s", proc.out.Tail(outputTail))
	}
}

// checkFlowSchema makes a request with kubeconfig and checks that API
// Priority and Fairness put it in the flow schema named schema (the
// X-Kubernetes-PF-FlowSchema-UID response header).
func (e *env) checkFlowSchema(kubeconfig, schema string) {
	e.t.Helper()
	fs, err := e.clients.Kube.FlowcontrolV1().FlowSchemas().Get(e.ctx, schema, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("the API server to classify kvlive's requests into flow schema "+schema, time.Minute, func() (bool, string) {
		resp, err := client.Get(cfg.Host + "/apis/kubevirt.io/v1/virtualmachines?limit=1")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		got := resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID")
		return got == string(fs.UID), fmt.Sprintf("%s: flow schema %q, want %q", resp.Status, got, fs.UID)
	})
}

// installManifests creates every object of the kustomization in dir (its
// resources list; kvlive's manifests use no other kustomize feature) and
// returns the ServiceAccount among them.
func (e *env) installManifests(dir string) *corev1.ServiceAccount {
	e.t.Helper()
	var k struct {
		Resources []string `json:"resources"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err == nil {
		err = yaml.Unmarshal(raw, &k)
	}
	if err != nil || len(k.Resources) == 0 {
		e.t.Fatalf("%s/kustomization.yaml: %v (%d resources)", dir, err, len(k.Resources))
	}
	var sa *corev1.ServiceAccount
	for _, file := range k.Resources {
		for _, obj := range decodeManifests(e.t, filepath.Join(dir, file)) {
			if err := e.create(obj); err != nil {
				e.t.Fatalf("%s: %v", file, err)
			}
			if s, ok := obj.(*corev1.ServiceAccount); ok {
				sa = s
			}
		}
	}
	if sa == nil {
		e.t.Fatalf("%s has no ServiceAccount", dir)
	}
	return sa
}

func decodeManifests(t *testing.T, path string) []runtime.Object {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	docs := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var doc runtime.RawExtension
		if err := docs.Decode(&doc); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(doc.Raw) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc.Raw, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		objs = append(objs, obj)
	}
}

// create sends one manifest object to the API server, which validates it.
func (e *env) create(obj runtime.Object) error {
	kc, opts := e.clients.Kube, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = kc.CoreV1().Namespaces().Create(e.ctx, o, opts)
	case *corev1.ServiceAccount:
		_, err = kc.CoreV1().ServiceAccounts(o.Namespace).Create(e.ctx, o, opts)
	case *corev1.PersistentVolumeClaim:
		_, err = kc.CoreV1().PersistentVolumeClaims(o.Namespace).Create(e.ctx, o, opts)
	case *corev1.Service:
		_, err = kc.CoreV1().Services(o.Namespace).Create(e.ctx, o, opts)
	case *appsv1.Deployment:
		_, err = kc.AppsV1().Deployments(o.Namespace).Create(e.ctx, o, opts)
	case *rbacv1.ClusterRole:
		_, err = kc.RbacV1().ClusterRoles().Create(e.ctx, o, opts)
	case *rbacv1.ClusterRoleBinding:
		_, err = kc.RbacV1().ClusterRoleBindings().Create(e.ctx, o, opts)
	case *rbacv1.Role:
		_, err = kc.RbacV1().Roles(o.Namespace).Create(e.ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = kc.RbacV1().RoleBindings(o.Namespace).Create(e.ctx, o, opts)
	case *flowcontrolv1.PriorityLevelConfiguration:
		_, err = kc.FlowcontrolV1().PriorityLevelConfigurations().Create(e.ctx, o, opts)
	case *flowcontrolv1.FlowSchema:
		_, err = kc.FlowcontrolV1().FlowSchemas().Create(e.ctx, o, opts)
	default:
		err = fmt.Errorf("no create for %T", obj)
	}
	return err
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as sa
// with a bound token, as kvlive's pod would in the cluster.
func (e *env) serviceAccountKubeconfig(sa *corev1.ServiceAccount) string {
	e.t.Helper()
	expiry := int64(3600)
	tr, err := e.clients.Kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(e.ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("token for %s/%s: %v", sa.Namespace, sa.Name, err)
	}
	admin, err := clientcmd.LoadFromFile(e.kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = cluster
	cfg.AuthInfos[sa.Name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: sa.Name}
	cfg.CurrentContext = "test"
	path := filepath.Join(e.t.TempDir(), "kubeconfig-"+sa.Name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		e.t.Fatal(err)
	}
	return path
}
