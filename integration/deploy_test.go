//go:build integration

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kvlive/integration/framework"
)

// TestShippedManifestsAreEnough installs deploy/kvlive on the API server
// (every object must pass its validation), then runs kvlive with a token of
// the manifests' ServiceAccount, so with exactly the shipped ClusterRole,
// through an edit and a switch, with leader election on (its Role). A verb missing from the role shows up as a
// failed outcome, a VM left behind or a "forbidden" in kvlive's log.
func TestShippedManifestsAreEnough(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 40}})
	sa := e.installManifests(filepath.Join(framework.RepoRoot(t), "deploy", "kvlive"))
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

	out := e.kvliveCommand(rolloutTimeout, "switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-A",
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

// installManifests creates every object the kustomization in dir builds
// (`kubectl kustomize`) and returns the ServiceAccount among them.
func (e *env) installManifests(dir string) *corev1.ServiceAccount {
	e.t.Helper()
	out, err := exec.CommandContext(e.ctx, framework.Binary(e.t, "kubectl"), "kustomize", dir).Output()
	if err != nil {
		e.t.Fatalf("kubectl kustomize %s: %v", dir, commandError(err))
	}
	var sa *corev1.ServiceAccount
	for _, obj := range decodeManifests(e.t, dir, out) {
		if err := e.create(obj); err != nil {
			e.t.Fatalf("%s: %v", dir, err)
		}
		if s, ok := obj.(*corev1.ServiceAccount); ok {
			sa = s
		}
	}
	if sa == nil {
		e.t.Fatalf("%s has no ServiceAccount", dir)
	}
	return sa
}

// commandError adds what a failed command wrote to standard error.
func commandError(err error) error {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}

func decodeManifests(t *testing.T, path string, raw []byte) []runtime.Object {
	t.Helper()
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
		if runtime.IsNotRegisteredError(err) {
			// A kind client-go does not know (the Prometheus Operator's):
			// kept as it is, for the API server to validate.
			u := &unstructured.Unstructured{}
			obj, err = u, u.UnmarshalJSON(doc.Raw)
		}
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

// TestEveryKustomizationPassesServerDryRun applies every kustomization under
// deploy/ with `kubectl apply --dry-run=server -k` on the real API server,
// which validates and admits each object as it would store it, and checks
// the bundled NATS's configuration with `nats-server -t` and against the
// stages that connect to it.
func TestEveryKustomizationPassesServerDryRun(t *testing.T) {
	_, kubeconfig := framework.StartAPIServer(t)
	deploy := filepath.Join(framework.RepoRoot(t), "deploy")
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), framework.Binary(t, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...).Output()
		if err != nil {
			t.Fatalf("kubectl %s: %v", strings.Join(args, " "), commandError(err))
		}
		return string(out)
	}
	// A dry run creates nothing, so namespaced objects need their
	// namespace to exist already, as on a cluster where it was created first.
	kubectl("create", "namespace", "kvlive")
	// deploy/monitoring's PrometheusRule and ServiceMonitor are checked
	// against the Prometheus Operator's own CRDs (hack/tools.sh fetches
	// them), and inside an overlay that deploys kvlive with it.
	kubectl("create", "-f", framework.Binary(t, "prometheus-operator-crds"))
	kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/prometheusrules.monitoring.coreos.com", "crd/servicemonitors.monitoring.coreos.com")
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, deploy)
	if err != nil {
		t.Fatal(err)
	}
	kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: kvlive\nresources:\n- " + filepath.Join(rel, "kvlive") +
		"\ncomponents:\n- " + filepath.Join(rel, "monitoring") + "\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	monitored := decodeManifests(t, "kvlive with monitoring", []byte(kubectl("kustomize", overlay)))
	kinds := map[string]bool{}
	for _, obj := range monitored {
		kinds[obj.GetObjectKind().GroupVersionKind().Kind] = true
	}
	if !kinds["PrometheusRule"] || !kinds["ServiceMonitor"] || !kinds["Deployment"] {
		t.Errorf("deploy/kvlive with the monitoring component builds kinds %v, want kvlive's with a PrometheusRule and a ServiceMonitor", kinds)
	}
	if out := kubectl("apply", "--dry-run=server", "-k", overlay); strings.Count(out, "(server dry run)") != len(monitored) {
		t.Errorf("kubectl apply --dry-run=server of deploy/kvlive with deploy/monitoring: want %d objects admitted:\n%s", len(monitored), out)
	}

	dirs, err := filepath.Glob(filepath.Join(deploy, "*", "kustomization.yaml"))
	if err != nil || len(dirs) < 5 {
		t.Fatalf("kustomizations under deploy/: %v (%v)", dirs, err)
	}
	for _, k := range dirs {
		dir := filepath.Dir(k)
		if filepath.Base(dir) == "monitoring" {
			continue // a component: checked within an overlay above
		}
		built := decodeManifests(t, dir, []byte(kubectl("kustomize", dir)))
		out := kubectl("apply", "--dry-run=server", "-k", dir)
		if n := strings.Count(out, "(server dry run)"); n != len(built) {
			t.Errorf("kubectl apply --dry-run=server -k deploy/%s: %d objects admitted, want the %d it builds:\n%s", filepath.Base(dir), n, len(built), out)
		}
	}
	if out := kubectl("get", "deployments,statefulsets,configmaps", "-n", "kvlive", "-o", "name"); strings.TrimSpace(strings.ReplaceAll(out, "configmap/kube-root-ca.crt", "")) != "" {
		t.Errorf("a dry run stored objects:\n%s", out)
	}

	checkBundledNATS(t, deploy, decodeManifests(t, "scale-out-nats", []byte(kubectl("kustomize", filepath.Join(deploy, "scale-out-nats")))))
}

// checkBundledNATS checks deploy/nats/nats.conf with `nats-server -t`, with
// the environment the StatefulSet gives it, and that every kvlive stage
// connects as a user nats.conf has, with that stage's role, and reads the
// password the server has for it.
func checkBundledNATS(t *testing.T, deploy string, objs []runtime.Object) {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join(deploy, "nats", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	serverEnv := map[string]string{} // variable to Secret key
	var stages []*appsv1.Deployment
	for _, obj := range objs {
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			for _, v := range o.Spec.Template.Spec.Containers[0].Env {
				if ref := v.ValueFrom.SecretKeyRef; ref != nil {
					serverEnv[v.Name] = ref.Key
				}
			}
		case *appsv1.Deployment:
			stages = append(stages, o)
		}
	}
	cmd := exec.CommandContext(t.Context(), framework.Binary(t, "nats-server"), "-t", "-c", "nats.conf")
	cmd.Dir = filepath.Join(deploy, "nats")
	cmd.Env = []string{"POD_NAME=kvlive-nats-0"}
	for name := range serverEnv {
		cmd.Env = append(cmd.Env, name+"=test")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("nats-server -t -c deploy/nats/nats.conf: %v\n%s", err, out)
	}

	if len(stages) != 3 {
		t.Fatalf("deploy/scale-out-nats has %d Deployments, want one per stage", len(stages))
	}
	for _, d := range stages {
		stage := d.Labels["app.kubernetes.io/component"]
		role := "KVLIVE_" + strings.ToUpper(stage)
		user := "kvlive-" + stage
		line := fmt.Sprintf(`{user: %q, password: $%s_PASSWORD, permissions: $%s}`, user, role, role)
		if !strings.Contains(string(conf), line) {
			t.Errorf("deploy/nats/nats.conf has no %s", line)
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		for _, want := range []string{"--stages=" + stage, "--nats-user=" + user, "--replicas=3"} {
			if !slices.Contains(args, want) {
				t.Errorf("%s: args %v lack %s", d.Name, args, want)
			}
		}
		if stage == "watcher" != slices.Contains(args, "--leader-elect") {
			t.Errorf("%s: --leader-elect is for the watcher alone: %v", d.Name, args)
		}
		vols := d.Spec.Template.Spec.Volumes
		if len(vols) != 1 || vols[0].Secret == nil || vols[0].Secret.Items[0].Key != serverEnv[role+"_PASSWORD"] {
			t.Errorf("%s reads its password from %+v, the server from key %q", d.Name, vols, serverEnv[role+"_PASSWORD"])
		}
	}
}
