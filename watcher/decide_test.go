package watcher

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		last *seen
		gen  int64
		want decision
	}{
		{"first sighting is recorded, not emitted", nil, 4, record},
		{"same generation: resync or a restart with nothing new", &seen{Generation: 4}, 4, skip},
		{"newer generation is emitted", &seen{Generation: 4}, 5, emit},
		{"changed while the watcher was down: several generations at once", &seen{Generation: 4}, 9, emit},
		{"older generation (object re-created under a reused record) is not emitted", &seen{Generation: 7}, 2, skip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decide(tt.last, tt.gen); got != tt.want {
				t.Errorf("decide = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestHandlerEnqueuesOnGenerationChangeOnly(t *testing.T) {
	obj := func(gen int64, labels map[string]string, rv string) *v1beta1.VirtualMachineClusterInstancetype {
		return &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: "u1", Generation: gen, Labels: labels, ResourceVersion: rv}}
	}
	tests := []struct {
		name     string
		old, new any
		want     int
	}{
		{"resync delivers the same object", obj(3, nil, "10"), obj(3, nil, "10"), 0},
		{"metadata-only update", obj(3, nil, "10"), obj(3, map[string]string{"a": "b"}, "11"), 0},
		{"status-only update keeps the generation", obj(3, nil, "10"), obj(3, nil, "12"), 0},
		{"spec update bumps the generation", obj(3, nil, "10"), obj(4, nil, "13"), 1},
		{"not a Kubernetes object", "garbage", obj(4, nil, "13"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fleet, err := kube.NewCache(testenv.FakeClients(nil), "")
			if err != nil {
				t.Fatal(err)
			}
			w, err := New(Config{Informers: fleet.ObjectInformers(), JetStream: testenv.JetStream(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.queue.ShutDown)
			h := w.handler(events.KindClusterInstancetype).(cache.ResourceEventHandlerFuncs)
			h.UpdateFunc(tt.old, tt.new)
			if got := w.queue.Len(); got != tt.want {
				t.Errorf("queued %d, want %d", got, tt.want)
			}
		})
	}
}
