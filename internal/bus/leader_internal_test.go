package bus

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestAPIPrefix: the leader read goes to the API the JetStream handle
// uses: the default, a prefix given with or without its final dot, a
// domain's.
func TestAPIPrefix(t *testing.T) {
	for _, c := range []struct {
		o    jetstream.JetStreamOptions
		want string
	}{
		{jetstream.JetStreamOptions{}, "$JS.API."},
		{jetstream.JetStreamOptions{APIPrefix: "$JS.hub.API."}, "$JS.hub.API."},
		{jetstream.JetStreamOptions{APIPrefix: "imported"}, "imported."},
		{jetstream.JetStreamOptions{Domain: "leaf"}, "$JS.leaf.API."},
	} {
		if got := apiPrefix(c.o); got != c.want {
			t.Errorf("apiPrefix(%+v) = %q, want %q", c.o, got, c.want)
		}
	}
}
