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
// turn. The server holds every list until all of them have arrived (or a
// few seconds passed) and counts how many it held at once.
func TestPreflightListsEveryKindAtOnce(t *testing.T) {
	var (
		mu               sync.Mutex
		held, mostAtOnce int
		all              = make(chan struct{})
	)
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
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(3 * time.Second): // lists made in turn never all arrive
		}
		mu.Lock()
		held--
		mu.Unlock()
		apiVersion, listKind, _ := strings.Cut(kind, " ")
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"apiVersion":%q,"kind":%q,"metadata":{},"items":[]}`, apiVersion, listKind)
	}))
	defer srv.Close()
	// Not kube.NewClients: the gate it turns on for the process would have
	// this package's informers on fakes wait for bookmarks no fake sends.
	cfg := &rest.Config{Host: srv.URL}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vc, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clients := kube.Clients{Kube: kc, Virt: vc, Host: srv.URL}
	if err := kube.Preflight(context.Background(), clients, ""); err != nil {
		t.Fatal(err)
	}
	if mostAtOnce != len(preflightKinds) {
		t.Errorf("Preflight had %d of its %d lists in flight at most; want all at once", mostAtOnce, len(preflightKinds))
	}
}
