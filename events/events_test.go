package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"kvlive/events"
)

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func validPlan() *events.Plan {
	return &events.Plan{
		EventID: "VirtualMachineClusterInstancetype/uid-1/5",
		VM:      events.VMRef{Namespace: "shop", Name: "web-1", UID: "vm-uid"},
		Action:  events.ResultLive,
		Changes: []events.Change{{Field: "cpu.sockets", From: "2", To: "3", Class: "live"}},
		Target: events.Target{Move: events.MoveRepin, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"},
			UID: "uid-1", Generation: 5, Pin: events.PinStatus, FromRevision: "web-1-u1.large-v1beta1-uid-1-4"},
	}
}

func TestPlanRoundTrip(t *testing.T) {
	body, err := events.Encode(events.TypePlan, "id-1", "kvlive/planner", "shop/web-1", at, validPlan())
	if err != nil {
		t.Fatal(err)
	}
	var got events.Plan
	env, err := events.Decode(body, events.TypePlan, &got)
	if err != nil {
		t.Fatal(err)
	}
	if env.SpecVersion != "1.0" || env.ID != "id-1" || env.Source != "kvlive/planner" || !env.Time.Equal(at) || env.DataContentType != "application/json" {
		t.Errorf("envelope = %+v", env)
	}
	want, _ := json.Marshal(validPlan())
	gotJSON, _ := json.Marshal(&got)
	if string(want) != string(gotJSON) {
		t.Errorf("round trip:\n got %s\nwant %s", gotJSON, want)
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	p := validPlan()
	p.Action = "sideways"
	if _, err := events.Encode(events.TypePlan, "id", "src", "", at, p); err == nil {
		t.Fatal("encoding a plan with an unknown action succeeded")
	}
	if _, err := events.Encode("io.kvlive.nope.v1", "id", "src", "", at, validPlan()); err == nil {
		t.Fatal("encoding an unknown type succeeded")
	}
}

func TestDecodeRejects(t *testing.T) {
	envelope := func(typ, data string) string {
		return `{"specversion":"1.0","id":"x","source":"s","type":"` + typ + `","time":"2026-11-30T12:00:00Z","datacontenttype":"application/json","data":` + data + `}`
	}
	good, _ := json.Marshal(validPlan())
	tests := []struct {
		name, body, want string
	}{
		{"empty", ``, events.ReasonMalformed},
		{"not json", `plan please`, events.ReasonMalformed},
		{"truncated", envelope(events.TypePlan, string(good))[:40], events.ReasonMalformed},
		{"array", `[1,2]`, events.ReasonMalformed},
		{"wrong specversion", strings.Replace(envelope(events.TypePlan, string(good)), `"1.0"`, `"0.3"`, 1), events.ReasonUnknownVersion},
		{"no id", strings.Replace(envelope(events.TypePlan, string(good)), `"id":"x"`, `"id":""`, 1), events.ReasonMalformed},
		{"no data", envelope(events.TypePlan, `null`), events.ReasonMalformed},
		{"future version", envelope("io.kvlive.plan.v2", string(good)), events.ReasonUnknownVersion},
		{"unknown type", envelope("com.example.thing.v1", string(good)), events.ReasonUnknownType},
		{"other kvlive type", envelope(events.TypeOutcome, string(good)), events.ReasonUnknownType},
		{"data not an object", envelope(events.TypePlan, `"live"`), events.ReasonMalformed},
		{"data wrong field type", envelope(events.TypePlan, `{"eventId":5}`), events.ReasonMalformed},
		{"plan without vm", envelope(events.TypePlan, `{"eventId":"e","action":"live","target":{"move":"repin","object":{"kind":"k","name":"n"}}}`), events.ReasonInvalid},
		{"plan with failed action", envelope(events.TypePlan, strings.Replace(string(good), `"live"`, `"failed"`, 1)), events.ReasonInvalid},
		{"plan with unknown move", envelope(events.TypePlan, strings.Replace(string(good), `"repin"`, `"teleport"`, 1)), events.ReasonInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p events.Plan
			_, err := events.Decode([]byte(tt.body), events.TypePlan, &p)
			var de *events.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want a *DecodeError", err)
			}
			if de.Reason != tt.want {
				t.Errorf("reason = %q (%v), want %q", de.Reason, err, tt.want)
			}
			if !events.IsDecodeError(err) {
				t.Error("IsDecodeError = false")
			}
		})
	}
}

func TestChangedValidate(t *testing.T) {
	ok := events.Changed{Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}, UID: "u", Generation: 2, NewSpec: json.RawMessage(`{}`)}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := map[string]func(*events.Changed){
		"no uid":         func(c *events.Changed) { c.UID = "" },
		"zero gen":       func(c *events.Changed) { c.Generation = 0 },
		"no spec":        func(c *events.Changed) { c.NewSpec = nil },
		"bad kind":       func(c *events.Changed) { c.Object.Kind = "Pod" },
		"no object name": func(c *events.Changed) { c.Object.Name = "" },
	}
	for name, mutate := range tests {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil", name)
		}
	}
}

func TestSwitchValidate(t *testing.T) {
	a := events.Ref{Kind: events.KindClusterInstancetype, Name: "a"}
	b := events.Ref{Kind: events.KindClusterInstancetype, Name: "b"}
	p := events.Ref{Kind: events.KindClusterPreference, Name: "p"}
	dev := events.Ref{Kind: events.KindInstancetype, Namespace: "dev", Name: "d"}
	tests := []struct {
		name string
		req  events.SwitchRequest
		ok   bool
	}{
		{"a to b", events.SwitchRequest{ID: "1", From: a, To: b}, true},
		{"same", events.SwitchRequest{ID: "1", From: a, To: a}, false},
		{"family mix", events.SwitchRequest{ID: "1", From: a, To: p}, false},
		{"no id", events.SwitchRequest{From: a, To: b}, false},
		{"to a namespaced type in its namespace", events.SwitchRequest{ID: "1", From: a, To: dev, Namespace: "dev"}, true},
		{"to a namespaced type in every namespace", events.SwitchRequest{ID: "1", From: a, To: dev}, false},
		{"to a namespaced type in another namespace", events.SwitchRequest{ID: "1", From: a, To: dev, Namespace: "prod"}, false},
		{"from a namespaced type in every namespace", events.SwitchRequest{ID: "1", From: dev, To: a}, true},
	}
	for _, tt := range tests {
		if err := tt.req.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v", tt.name, err)
		}
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		in, ns string
		want   events.Ref
		err    bool
	}{
		{in: "clusterinstancetype/u1.large", want: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}},
		{in: "VirtualMachineClusterInstancetype/u1.large", want: events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}},
		{in: "instancetype/team/std", want: events.Ref{Kind: events.KindInstancetype, Namespace: "team", Name: "std"}},
		{in: "instancetype/std", ns: "dev", want: events.Ref{Kind: events.KindInstancetype, Namespace: "dev", Name: "std"}},
		{in: "preference/std", ns: "dev", want: events.Ref{Kind: events.KindPreference, Namespace: "dev", Name: "std"}},
		{in: "instancetype/std", err: true},
		{in: "clusterinstancetype/ns/x", err: true},
		{in: "pod/x", err: true},
		{in: "u1.large", err: true},
		{in: "/u1", err: true},
	}
	for _, tt := range tests {
		got, err := events.ParseRef(tt.in, tt.ns)
		if (err != nil) != tt.err || (!tt.err && got != tt.want) {
			t.Errorf("ParseRef(%q, %q) = %+v, %v", tt.in, tt.ns, got, err)
		}
	}
}

func TestRefKeyAndString(t *testing.T) {
	c := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"}
	n := events.Ref{Kind: events.KindInstancetype, Namespace: "team", Name: "std"}
	if c.Key() != "VirtualMachineClusterInstancetype/_/u1" || n.Key() != "VirtualMachineInstancetype/team/std" {
		t.Errorf("keys = %q, %q", c.Key(), n.Key())
	}
	if c.String() != "clusterinstancetype/u1" || n.String() != "instancetype/team/std" {
		t.Errorf("strings = %q, %q", c.String(), n.String())
	}
}

func TestMsgIDs(t *testing.T) {
	if got := events.EventID(events.KindClusterInstancetype, "uid", 5); got != "VirtualMachineClusterInstancetype/uid/5" {
		t.Errorf("EventID = %q", got)
	}
	if got := events.PlanID("ev", "vm"); got != "ev/vm" {
		t.Errorf("PlanID = %q", got)
	}
	if got := events.OutcomeID("ev", "vm", 2); got != "ev/vm/2" {
		t.Errorf("OutcomeID = %q", got)
	}
}

func TestNewMsgHeaders(t *testing.T) {
	m := events.NewMsg("kvlive.plans.shop", "ev/vm", events.TypePlan, []byte("{}"))
	if m.Header.Get("Nats-Msg-Id") != "ev/vm" || m.Header.Get("Content-Type") != events.ContentType || m.Header.Get("ce-type") != events.TypePlan {
		t.Errorf("headers = %v", m.Header)
	}
}

func TestIsPlanSubject(t *testing.T) {
	for subject, want := range map[string]bool{
		events.PlanSubject("ns", "switch/x"):    true,
		events.HeldSubject("ns", "switch/x"):    false,
		events.StagedSubject(1, "switch/x"):     false,
		events.OutcomeSubject("ns", "switch/x"): false,
		"kvlive.plansx.ns.e":                    false,
	} {
		if got := events.IsPlanSubject(subject); got != want {
			t.Errorf("events.IsPlanSubject(%q) = %v, want %v", subject, got, want)
		}
	}
}
