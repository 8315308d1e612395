package events

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestConflict: a lost compare-and-set is a conflict however the server
// reports it, a single-replica stream (10071) or a replicated one (10164,
// raw as nats.go returns it when Create loses re-creating a deleted key),
// and nothing else is.
func TestConflict(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"key exists (R1 create)", fmt.Errorf("take: %w", jetstream.ErrKeyExists), true},
		{"revision mismatch (update)", fmt.Errorf("%w: %w", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Code: 400}, jetstream.ErrKeyRevisionMismatch), true},
		{"raw 10164 (R3 re-create of a deleted key)", fmt.Errorf("take: %w", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Code: 400, Description: "wrong last sequence"}), true},
		{"raw 10071", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Code: 400}, true},
		{"another API error", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamNotFound, Code: 404}, false},
		{"timeout", errors.New("context deadline exceeded"), false},
	} {
		if got := Conflict(tt.err); got != tt.want {
			t.Errorf("%s: Conflict(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
