package kube_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"kubevirt.io/client-go/kubevirt"

	"kvlive/internal/kube"
)

// preflightKinds are the lists Preflight makes: the resource each path
// ends in, and the list kind its answer names.
var preflightKinds = map[string]string{
	"virtualmachines":                    "kubevirt.io/v1 VirtualMachineList",
	"virtualmachineinstances":            "kubevirt.io/v1 VirtualMachineInstanceList",
	"kubevirts":                          "kubevirt.io/v1 KubeVirtList",
	"controllerrevisions":                "apps/v1 ControllerRevisionList",
	"virtualmachineclusterinstancetypes": "instancetype.kubevirt.io/v1beta1 VirtualMachineClusterInstancetypeList",
	"virtualmachineinstancetypes":        "instancetype.kubevirt.io/v1beta1 VirtualMachineInstancetypeList",
	"virtualmachineclusterpreferences":   "instancetype.kubevirt.io/v1beta1 VirtualMachineClusterPreferenceList",
	"virtualmachinepreferences":          "instancetype.kubevirt.io/v1beta1 VirtualMachinePreferenceList",
}

// TestPreflightListsEveryKindAtOnce: Preflight's lists are in flight
// together, so a one-shot command waits for the slowest, not for each in
// turn. The server holds every list until all of them have arrived, or
// until 10 s after the first arrived (lists made in turn never all
// arrive; later ones then pass at once), and counts how many it held at
// once.
func TestPreflightListsEveryKindAtOnce(t *testing.T) {
	var (
		mu               sync.Mutex
		held, mostAtOnce int
		release          = make(chan struct{}) // closed once all arrived, or 10 s after the first
		released         sync.Once
		timer            *time.Timer
	)
	releaseHeld := func() { released.Do(func() { close(release) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, ok := preflightKinds[path.Base(r.URL.Path)]
		if !ok || r.Method != http.MethodGet {
			http.Error(w, "not a list Preflight makes: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		mu.Lock()
		held++
		mostAtOnce = max(mostAtOnce, held)
		if held == len(preflightKinds) {
			releaseHeld()
		}
		if timer == nil {
			timer = time.AfterFunc(10*time.Second, releaseHeld)
		}
		mu.Unlock()
		<-release
		mu.Lock()
		held--
		mu.Unlock()
		apiVersion, listKind, _ := strings.Cut(kind, " ")
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"apiVersion":%q,"kind":%q,"metadata":{},"items":[]}`, apiVersion, listKind)
	}))
	defer srv.Close()
	if err := kube.Preflight(context.Background(), clientsOf(t, srv.URL), ""); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	if mostAtOnce != len(preflightKinds) {
		t.Errorf("Preflight had %d of its %d lists in flight at most; want all at once", mostAtOnce, len(preflightKinds))
	}
}

// TestPreflightReportsARefusalAtOnce: the first list refused is reported
// without waiting for a list that hangs, which is cancelled if it was
// made (Preflight may give up on it before it is sent).
func TestPreflightReportsARefusalAtOnce(t *testing.T) {
	var (
		mu    sync.Mutex
		hung  bool
		ended = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch path.Base(r.URL.Path) {
		case "virtualmachines":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Forbidden","code":403,"message":"virtualmachines is forbidden"}`)
		case "virtualmachinepreferences":
			mu.Lock()
			hung = true
			mu.Unlock()
			<-r.Context().Done() // hangs until Preflight gives up on it
			close(ended)
		default:
			kind := preflightKinds[path.Base(r.URL.Path)]
			apiVersion, listKind, _ := strings.Cut(kind, " ")
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"apiVersion":%q,"kind":%q,"metadata":{},"items":[]}`, apiVersion, listKind)
		}
	}))
	defer srv.Close()
	result := make(chan error, 1)
	go func() { result <- kube.Preflight(context.Background(), clientsOf(t, srv.URL), "") }()
	select {
	case err := <-result:
		if err == nil || !strings.Contains(err.Error(), "refuses to list virtualmachines.kubevirt.io") {
			t.Fatalf("Preflight said %v; want the refusal to list VMs", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Preflight still waiting after 30s for a list that hangs; want the refusal reported at once")
	}
	mu.Lock()
	defer mu.Unlock()
	if !hung {
		return
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the list that hangs was still out 30s after Preflight returned; want it cancelled")
	}
}

// clientsOf builds both clientsets for the server at host, with a
// request timeout longer than the tests wait. Not kube.NewClients: the gate
// it turns on for the process would have this package's informers on
// fakes wait for bookmarks no fake sends.
func clientsOf(t *testing.T, host string) kube.Clients {
	t.Helper()
	cfg := &rest.Config{Host: host}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vc, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube.Clients{Kube: kc, Virt: vc, Host: host, Timeout: time.Minute}
}
