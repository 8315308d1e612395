//go:build integration && bench

package integration

import (
	"encoding/json"
	"net/http"
)

// readNATS reads what the test's nats-server carried, from its monitoring
// endpoint: messages in and out (every publish, delivery, ack and
// request), and the messages each stream stored (its last sequence). The
// nats rows say where kvlive's NATS work per VM goes; the counts share
// apiUse's form.
func (e *env) readNATS() apiUse {
	e.t.Helper()
	use := apiUse{}
	if e.nats == nil {
		return use
	}
	var varz struct {
		InMsgs  float64 `json:"in_msgs"`
		OutMsgs float64 `json:"out_msgs"`
	}
	e.monitor("/varz", &varz)
	use["msgs in"], use["msgs out"] = varz.InMsgs, varz.OutMsgs
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name  string `json:"name"`
				State struct {
					LastSeq float64 `json:"last_seq"`
				} `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	e.monitor("/jsz?accounts=true&streams=true", &jsz)
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			use["stored "+s.Name] += s.State.LastSeq
		}
	}
	return use
}

// monitor decodes a nats-server monitoring endpoint's JSON into v.
func (e *env) monitor(path string, v any) {
	e.t.Helper()
	resp, err := http.Get(e.nats.MonitorURL() + path)
	if err != nil {
		e.t.Fatalf("nats-server %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		e.t.Fatalf("nats-server %s: %v", path, err)
	}
}
