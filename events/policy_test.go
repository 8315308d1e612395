package events

import (
	"strings"
	"testing"
)

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
	want := Policy{BatchSize: "10%", Canary: "5", Pause: "2m", FailureThreshold: "1%", OnFailure: OnFailureAbort,
		ProgressDeadline: "10m", Order: "label=zone", Restart: RestartSkip}
	if p != want {
		t.Errorf("parsed %+v, want %+v", p, want)
	}
	if p, err := ParsePolicy(`{"canary": 3, "pause": "manual"}`); err != nil || p.Canary != "3" || p.Pause != PauseManual {
		t.Errorf("JSON with a number: %+v, %v", p, err)
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
		`webhookTimeout: 6m`:           "webhookTimeout: 6m is longer than the 5m0s kvlive waits for a webhook at most",
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
	// A hook's URL may carry its secret: the error, which the rollout's
	// record keeps for the reader role, names the field, not the value.
	if _, err := ParsePolicy(`confirmWebhook: hooks.slack.com/services/T0/B0/s3cret`); err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "confirmWebhook") {
		t.Errorf("a webhook URL without a scheme: %v, want an error naming the field without the URL", err)
	}
}
