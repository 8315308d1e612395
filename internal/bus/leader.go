package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KeyAtLeader reads key's latest value in bucket from the leader of the
// bucket's stream: a message get, which only the leader answers. A
// bucket's Get is a direct get, which any replica of a replicated bucket
// may answer, one behind the leader among them: a key another process has
// just written can read as missing there. Where a missing key is acted on
// (a plan whose rollout has no record is dead-lettered), it is asked of
// the leader first. ok is false when the leader holds no value for key
// (never written, deleted or purged). An error is the read's (the leader
// being elected, the server unreachable): nothing is said of the key.
func KeyAtLeader(ctx context.Context, js jetstream.JetStream, bucket, key string) (v []byte, ok bool, err error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	if err != nil {
		return nil, false, err
	}
	r := newRetrier(0)
	if reading, isReading := js.(readingJS); isReading {
		r = reading.r
	}
	subject := apiPrefix(js.Options()) + "STREAM.MSG.GET.KV_" + bucket
	// Only the leader answers, and none while one is elected: each try
	// has its time limit, and a try that meets an election is retried as
	// every read is (Reads).
	got, err := value(ctx, r, "key "+key+" of "+bucket+" at the leader", func(ctx context.Context) (atLeader, error) {
		m, err := js.Conn().RequestWithContext(ctx, subject, req)
		if err != nil {
			return atLeader{}, err
		}
		return parseMsgGet(m.Data)
	})
	if err != nil {
		return nil, false, fmt.Errorf("bus: %w", err)
	}
	return got.value, got.ok, nil
}

// atLeader is what the leader said of a key.
type atLeader struct {
	value []byte
	ok    bool
}

// parseMsgGet reads a stream's answer to a message get of a key: its
// value, none (not found, or a delete or purge marker), or the API's
// error.
func parseMsgGet(data []byte) (atLeader, error) {
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Message *struct {
			Header []byte `json:"hdrs,omitempty"`
			Data   []byte `json:"data,omitempty"`
		} `json:"message,omitempty"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return atLeader{}, err
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return atLeader{}, nil
	case resp.Error != nil:
		return atLeader{}, resp.Error
	case resp.Message == nil:
		return atLeader{}, jetstream.ErrInvalidJetStreamResponse
	}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return atLeader{}, err
		}
		if h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != "" {
			return atLeader{}, nil // a delete or purge marker: the key holds no value
		}
	}
	return atLeader{value: resp.Message.Data, ok: true}, nil
}

// apiPrefix is the subject prefix of o's JetStream API.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "" && strings.HasSuffix(o.APIPrefix, "."):
		return o.APIPrefix
	case o.APIPrefix != "":
		return o.APIPrefix + "." // as jetstream.NewWithAPIPrefix completes it
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}
