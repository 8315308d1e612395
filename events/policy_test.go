package events

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBatches(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Policy
		n    int
		want []int
	}{
		{"no policy: one batch", Policy{}, 7, []int{7}},
		{"no VMs: no batch", Policy{BatchSize: "10%"}, 0, nil},
		{"10% of 1000 with a canary of 5", Policy{BatchSize: "10%", Canary: "5"}, 1000,
			[]int{5, 100, 100, 100, 100, 100, 100, 100, 100, 100, 95}},
		{"percent rounds up", Policy{BatchSize: "10%"}, 15, []int{2, 2, 2, 2, 2, 2, 2, 1}},
		{"1% of a small fleet is one VM", Policy{BatchSize: "1%"}, 3, []int{1, 1, 1}},
		{"count", Policy{BatchSize: "4"}, 10, []int{4, 4, 2}},
		{"canary alone, then the rest", Policy{Canary: "2"}, 10, []int{2, 8}},
		{"canary percent rounds up", Policy{Canary: "1%", BatchSize: "50%"}, 10, []int{1, 5, 4}},
		{"canary as big as the fleet", Policy{Canary: "20", BatchSize: "5"}, 10, []int{10}},
		{"batch bigger than the fleet", Policy{BatchSize: "500"}, 10, []int{10}},
		{"100%", Policy{BatchSize: "100%"}, 10, []int{10}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Batches(tt.n)
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
			if tt.p.Batched(tt.n) != (len(tt.want) > 1) {
				t.Errorf("Batched(%d) = %v", tt.n, tt.p.Batched(tt.n))
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
		if got := (Policy{FailureThreshold: tt.threshold}).Tolerated(tt.n); got != tt.want {
			t.Errorf("threshold %q of %d: %d, want %d", tt.threshold, tt.n, got, tt.want)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy(`
batchSize: 10%
canary: "5"
pause: 2m
failureThreshold: 1%
onFailure: abort
progressDeadline: 10m
order: label=zone
restart: skip
`)
	if err != nil {
		t.Fatal(err)
	}
	if p.BatchSize != "10%" || p.Canary != "5" || !p.Aborts() || !p.SkipsRestarts() || p.Deadline() != 10*time.Minute {
		t.Errorf("parsed %+v", p)
	}
	if d, manual := p.PauseFor(); d != 2*time.Minute || manual {
		t.Errorf("pause %v %v", d, manual)
	}
	if key, ok := p.OrderLabel(); !ok || key != "zone" {
		t.Errorf("order label %q %v", key, ok)
	}
	if p, err := ParsePolicy(`{"canary": 3, "pause": "manual"}`); err != nil || p.Canary != "3" {
		t.Errorf("JSON with a number: %+v, %v", p, err)
	} else if _, manual := p.PauseFor(); !manual {
		t.Error("pause manual")
	}
	for doc, want := range map[string]string{
		`batchSize: 0`:                 `batchSize: "0": want more than zero`,
		`batchSize: 150%`:              "a percent of at most 100",
		`canary: few`:                  `canary: "few": want a count (50) or a percent (10%)`,
		`pause: soon`:                  `pause: "soon": want a duration`,
		`progressDeadline: -1m`:        "progressDeadline",
		`onFailure: panic`:             `onFailure: "panic": want pause or abort`,
		`order: random`:                `order: "random"`,
		`order: "label="`:              `order: "label="`,
		`restart: maybe`:               `restart: "maybe"`,
		`maxInFlight: -1`:              "maxInFlight: -1",
		`batch: 10%`:                   `unknown field "batch"`,
		`[1, 2]`:                       "cannot unmarshal",
		`{batchSize: 0, canary: nope}`: "batchSize", // both named
		strings.Repeat("#", 5000):      "more than 4096",
	} {
		_, err := ParsePolicy(doc)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "rollout policy: ") {
			t.Errorf("ParsePolicy(%.40q) = %v, want an error with %q", doc, err, want)
		}
	}
	if _, err := ParsePolicy(`{batchSize: 0, canary: nope}`); err == nil || !strings.Contains(err.Error(), "canary") {
		t.Errorf("every wrong field named: %v", err)
	}
}
