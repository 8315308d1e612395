package events

import "testing"

func TestUnmarshalSpansReadsBothForms(t *testing.T) {
	one, err := MarshalSpan(Span{TraceID: "t1", SpanID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	many, err := MarshalSpans([]Span{{TraceID: "t1", SpanID: "b"}, {TraceID: "t2", SpanID: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		body string
		want []string
	}{
		{string(one), []string{"a"}},
		{"\n" + string(many), []string{"b", "c"}},
	} {
		spans, err := UnmarshalSpans([]byte(c.body))
		if err != nil || len(spans) != len(c.want) {
			t.Fatalf("%s: %v %v", c.body, spans, err)
		}
		for i, s := range spans {
			if s.SpanID != c.want[i] {
				t.Errorf("%s: span %d is %s, want %s", c.body, i, s.SpanID, c.want[i])
			}
		}
	}
	for _, bad := range []string{`[{"traceId":"t"}]`, `{"spanId":"a"}`, `[1]`, ``} {
		if _, err := UnmarshalSpans([]byte(bad)); err == nil {
			t.Errorf("%q decoded without an error", bad)
		}
	}
}
