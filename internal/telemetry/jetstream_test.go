package telemetry

import (
	"fmt"
	"strings"
	"testing"

	"kvlive/events"
)

func TestSpanMessagesSplitWhatExceedsTheLimit(t *testing.T) {
	var spans []events.Span
	for i := range 100 {
		spans = append(spans, events.Span{TraceID: "t", SpanID: fmt.Sprintf("s%03d", i), Name: strings.Repeat("x", i%7*40)})
	}
	const limit = 2048
	msgs, err := spanMessages(spans, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 2 {
		t.Fatalf("%d messages for %d spans under %d bytes each, want the spans split", len(msgs), len(spans), limit)
	}
	var got []string
	for _, m := range msgs {
		if len(m.data) > limit && m.n > 1 {
			t.Errorf("a message of %d spans has %d bytes, over %d", m.n, len(m.data), limit)
		}
		decoded, err := events.UnmarshalSpans(m.data)
		if err != nil || len(decoded) != m.n || decoded[0].SpanID != m.first {
			t.Fatalf("message %+v decodes to %d spans (%v)", m.first, len(decoded), err)
		}
		for _, s := range decoded {
			got = append(got, s.SpanID)
		}
	}
	if len(got) != len(spans) || got[0] != "s000" || got[len(got)-1] != "s099" {
		t.Fatalf("spans after splitting: %v", got)
	}

	huge := []events.Span{{TraceID: "t", SpanID: "big", Name: strings.Repeat("y", 3*limit)}, {TraceID: "t", SpanID: "small"}}
	msgs, err = spanMessages(huge, limit)
	if err != nil || len(msgs) != 2 || msgs[0].n != 1 || msgs[1].first != "small" {
		t.Fatalf("a span over the limit: %+v %v, want it alone and the next in a message of its own", msgs, err)
	}
}
