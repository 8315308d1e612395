package events_test

import (
	"bytes"
	"testing"

	"kvlive/events"
)

// FuzzDecode checks that no input crashes decoding, and that whatever
// decodes also re-encodes, decodes, and encodes again to the same bytes.
func FuzzDecode(f *testing.F) {
	good, _ := events.Encode(events.TypePlan, "id", "src", "subj", at, validPlan())
	f.Add(good)
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"s","type":"io.kvlive.plan.v9","data":{}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var p events.Plan
		env, err := events.Decode(body, events.TypePlan, &p)
		if err != nil {
			if !events.IsDecodeError(err) {
				t.Fatalf("error %v is not a DecodeError", err)
			}
			return
		}
		again, err := events.Encode(env.Type, env.ID, env.Source, env.Subject, env.Time, &p)
		if err != nil {
			t.Fatalf("decoded plan does not re-encode: %v", err)
		}
		var q events.Plan
		if _, err := events.Decode(again, events.TypePlan, &q); err != nil {
			t.Fatalf("re-encoded plan does not decode: %v", err)
		}
		third, err := events.Encode(env.Type, env.ID, env.Source, env.Subject, env.Time, &q)
		if err != nil || !bytes.Equal(third, again) {
			t.Fatalf("plan changed in a round trip (%v):\n%s\n%s", err, again, third)
		}
	})
}
