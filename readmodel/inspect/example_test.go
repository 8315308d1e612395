package inspect_test

import (
	"os"
	"time"

	"kvlive/events"
	"kvlive/readmodel/inspect"
)

// A rollout's trace: the planner's span, and two per-VM apply spans that
// root their own traces and link to it, so they hang under it marked ↪.
func ExampleTree_Render() {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	plan := events.SpanLink{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7"}
	spans := []events.Span{
		{TraceID: plan.TraceID, SpanID: plan.SpanID, Name: "planner.plan clusterinstancetype/u1.medium", Start: start, End: at(20)},
		{TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331", Name: "applier.apply shop/web-1",
			Start: at(20), End: at(80), Links: []events.SpanLink{plan}, Attributes: map[string]any{"kvlive.result": "live"},
			Events: []events.SpanEvent{{Name: "pin moved", Time: at(32)}}},
		{TraceID: "5b8efff798038103d269b633813fc60c", SpanID: "eee19b7ec3c1b174", Name: "applier.apply shop/db-1",
			Start: at(22), End: at(40), Links: []events.SpanLink{plan}, Attributes: map[string]any{"kvlive.result": "restart"}},
	}
	tree := inspect.NewTree(plan.TraceID, spans)
	_ = tree.Render(os.Stdout, inspect.WaterfallOptions{BarWidth: 20})
	// Output:
	// trace 4bf92f3577b34da6a3ce929d0e0e4736 · 3 spans · 80ms · from 2026-11-30T12:00:00.000Z
	//                                                       0                 80ms
	// planner.plan clusterinstancetype/u1.medium      20ms  │█████               │
	//   ↪ applier.apply shop/web-1                    60ms  │     ███████████████│  live
	//     · pin moved +12ms
	//   ↪ applier.apply shop/db-1                     18ms  │     █████          │  restart
}
