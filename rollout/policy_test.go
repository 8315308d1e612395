package rollout

import (
	"slices"
	"testing"
	"time"

	"kvlive/events"
)

func TestBatches(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    events.Policy
		n    int
		want []int
	}{
		{"no policy: one batch", events.Policy{}, 7, []int{7}},
		{"no VMs: no batch", events.Policy{BatchSize: "10%"}, 0, nil},
		{"10% of 1000 with a canary of 5", events.Policy{BatchSize: "10%", Canary: "5"}, 1000,
			[]int{5, 100, 100, 100, 100, 100, 100, 100, 100, 100, 95}},
		{"percent rounds up", events.Policy{BatchSize: "10%"}, 15, []int{2, 2, 2, 2, 2, 2, 2, 1}},
		{"1% of a small fleet is one VM", events.Policy{BatchSize: "1%"}, 3, []int{1, 1, 1}},
		{"count", events.Policy{BatchSize: "4"}, 10, []int{4, 4, 2}},
		{"canary alone, then the rest", events.Policy{Canary: "2"}, 10, []int{2, 8}},
		{"canary percent rounds up", events.Policy{Canary: "1%", BatchSize: "50%"}, 10, []int{1, 5, 4}},
		{"canary as big as the fleet", events.Policy{Canary: "20", BatchSize: "5"}, 10, []int{10}},
		{"batch bigger than the fleet", events.Policy{BatchSize: "500"}, 10, []int{10}},
		{"100%", events.Policy{BatchSize: "100%"}, 10, []int{10}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Batches(tt.p, tt.n)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Batches(%d) = %v, want %v", tt.n, got, tt.want)
			}
			sum := 0
			for _, b := range got {
				sum += b
			}
			if sum != tt.n {
				t.Errorf("batches hold %d VMs, want %d", sum, tt.n)
			}
			if Batched(tt.p, tt.n) != (len(tt.want) > 1) {
				t.Errorf("Batched(%d) = %v", tt.n, Batched(tt.p, tt.n))
			}
		})
	}
}

func TestTolerated(t *testing.T) {
	for _, tt := range []struct {
		threshold string
		n, want   int
	}{
		{"", 1000, 0}, {"3", 1000, 3}, {"1%", 1000, 10}, {"1%", 99, 0}, {"50%", 3, 1}, {"0", 10, 0},
	} {
		if got := Tolerated(events.Policy{FailureThreshold: tt.threshold}, tt.n); got != tt.want {
			t.Errorf("threshold %q of %d: %d, want %d", tt.threshold, tt.n, got, tt.want)
		}
	}
}

func TestPolicyReadings(t *testing.T) {
	p, err := events.ParsePolicy(`{pause: 2m, onFailure: abort, progressDeadline: 10m, order: label=zone, restart: skip}`)
	if err != nil {
		t.Fatal(err)
	}
	if !Aborts(p) || !SkipsRestarts(p) || Deadline(p) != 10*time.Minute {
		t.Errorf("read %+v", p)
	}
	if d, manual := PauseFor(p); d != 2*time.Minute || manual {
		t.Errorf("pause %v %v", d, manual)
	}
	if key, ok := OrderLabel(p); !ok || key != "zone" {
		t.Errorf("order label %q %v", key, ok)
	}
	if _, manual := PauseFor(events.Policy{Pause: events.PauseManual}); !manual {
		t.Error("pause manual")
	}
	if Aborts(events.Policy{}) || SkipsRestarts(events.Policy{}) || Deadline(events.Policy{}) != 0 {
		t.Error("the zero policy pauses on failure, moves restarts and has no deadline")
	}
}
