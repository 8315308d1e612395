package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
func KeyAtLeader(ctx context.Context, js jetstream.JetStream, bucket, key string) (value []byte, ok bool, err error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	if err != nil {
		return nil, false, err
	}
	if _, set := ctx.Deadline(); !set {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderReadTimeout)
		defer cancel()
	}
	subject := apiPrefix(js.Options()) + "STREAM.MSG.GET.KV_" + bucket
	m, err := js.Conn().RequestWithContext(ctx, subject, req)
	if err != nil {
		return nil, false, fmt.Errorf("bus: key %s of %s at the leader: %w", key, bucket, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Message *struct {
			Header []byte `json:"hdrs,omitempty"`
			Data   []byte `json:"data,omitempty"`
		} `json:"message,omitempty"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, false, fmt.Errorf("bus: key %s of %s at the leader: %w", key, bucket, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, false, nil
	case resp.Error != nil:
		return nil, false, fmt.Errorf("bus: key %s of %s at the leader: %w", key, bucket, resp.Error)
	case resp.Message == nil:
		return nil, false, fmt.Errorf("bus: key %s of %s at the leader: %w", key, bucket, jetstream.ErrInvalidJetStreamResponse)
	}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, false, fmt.Errorf("bus: key %s of %s at the leader: %w", key, bucket, err)
		}
		if h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != "" {
			return nil, false, nil // a delete or purge marker: the key holds no value
		}
	}
	return resp.Message.Data, true, nil
}

// leaderReadTimeout bounds KeyAtLeader when its context has no deadline.
const leaderReadTimeout = 5 * time.Second

// apiPrefix is the subject prefix of o's JetStream API.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		return o.APIPrefix
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}
