package bus

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NewJetStream is jetstream.New with Reads over the result: every kvlive
// process and command reaches its streams and buckets through it.
func NewJetStream(nc *nats.Conn, bound time.Duration, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	return Reads(js, bound), nil
}

// Reads returns js with every read of a stream or a bucket retried through
// NATS leader elections (see Transient) for up to bound, ReadBound when
// bound is 0: looking up a stream, bucket or consumer, stream info, getting
// a message or a key, listing keys, creating the ordered consumer a read
// uses. Writes (publishing, creating, updating, deleting) are js's own:
// kvlive gives each its own retry rules where it makes it. Reading a
// stream message by message, which a leader election can break midway, is
// Scan's job.
func Reads(js jetstream.JetStream, bound time.Duration) jetstream.JetStream {
	if r, ok := js.(readingJS); ok {
		js = r.JetStream
	}
	return readingJS{JetStream: js, r: newRetrier(bound)}
}

// boundOf is the read bound js was given by Reads, else ReadBound.
func boundOf(js jetstream.JetStream) retrier {
	if r, ok := js.(readingJS); ok {
		return r.r
	}
	return newRetrier(0)
}

type readingJS struct {
	jetstream.JetStream
	r retrier
}

func (j readingJS) AccountInfo(ctx context.Context) (*jetstream.AccountInfo, error) {
	return value(ctx, j.r, "jetstream account info", j.JetStream.AccountInfo)
}

func (j readingJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := value(ctx, j.r, "stream "+name, func(ctx context.Context) (jetstream.Stream, error) {
		return j.JetStream.Stream(ctx, name)
	})
	if err != nil {
		return nil, err
	}
	return readingStream{Stream: s, name: name, r: j.r}, nil
}

func (j readingJS) StreamNameBySubject(ctx context.Context, subject string) (string, error) {
	return value(ctx, j.r, "stream of subject "+subject, func(ctx context.Context) (string, error) {
		return j.JetStream.StreamNameBySubject(ctx, subject)
	})
}

func (j readingJS) Consumer(ctx context.Context, stream, name string) (jetstream.Consumer, error) {
	return value(ctx, j.r, "stream "+stream+": consumer "+name, func(ctx context.Context) (jetstream.Consumer, error) {
		return j.JetStream.Consumer(ctx, stream, name)
	})
}

func (j readingJS) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	return value(ctx, j.r, "stream "+stream+": ordered consumer", func(ctx context.Context) (jetstream.Consumer, error) {
		return j.JetStream.OrderedConsumer(ctx, stream, cfg)
	})
}

func (j readingJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := value(ctx, j.r, "bucket "+bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return j.JetStream.KeyValue(ctx, bucket)
	})
	if err != nil {
		return nil, err
	}
	return readingKV{KeyValue: kv, r: j.r}, nil
}

// readingStream is a stream whose reads Reads retries.
type readingStream struct {
	jetstream.Stream
	name string
	r    retrier
}

func (s readingStream) Info(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	return value(ctx, s.r, "stream "+s.name+": info", func(ctx context.Context) (*jetstream.StreamInfo, error) {
		return s.Stream.Info(ctx, opts...)
	})
}

func (s readingStream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	return value(ctx, s.r, fmt.Sprintf("stream %s: message %d", s.name, seq), func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return s.Stream.GetMsg(ctx, seq, opts...)
	})
}

func (s readingStream) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	return value(ctx, s.r, "stream "+s.name+": last message on "+subject, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return s.Stream.GetLastMsgForSubject(ctx, subject)
	})
}

func (s readingStream) Consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	return value(ctx, s.r, "stream "+s.name+": consumer "+name, func(ctx context.Context) (jetstream.Consumer, error) {
		return s.Stream.Consumer(ctx, name)
	})
}

func (s readingStream) OrderedConsumer(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	return value(ctx, s.r, "stream "+s.name+": ordered consumer", func(ctx context.Context) (jetstream.Consumer, error) {
		return s.Stream.OrderedConsumer(ctx, cfg)
	})
}

// readingKV is a bucket whose reads Reads retries.
type readingKV struct {
	jetstream.KeyValue
	r retrier
}

func (kv readingKV) what(s string) string { return "bucket " + kv.Bucket() + ": " + s }

func (kv readingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return value(ctx, kv.r, kv.what("key "+key), func(ctx context.Context) (jetstream.KeyValueEntry, error) {
		return kv.KeyValue.Get(ctx, key)
	})
}

func (kv readingKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	return value(ctx, kv.r, kv.what(fmt.Sprintf("key %s revision %d", key, revision)), func(ctx context.Context) (jetstream.KeyValueEntry, error) {
		return kv.KeyValue.GetRevision(ctx, key, revision)
	})
}

func (kv readingKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	return value(ctx, kv.r, kv.what("keys"), func(ctx context.Context) ([]string, error) {
		return kv.KeyValue.Keys(ctx, opts...)
	})
}

func (kv readingKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	return kv.list(ctx, func(ctx context.Context) (jetstream.KeyLister, error) { return kv.KeyValue.ListKeys(ctx, opts...) })
}

func (kv readingKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	return kv.list(ctx, func(ctx context.Context) (jetstream.KeyLister, error) {
		// nats.go writes the bucket's subject prefix into the filters it
		// is given: each try gets its own copy, or a try after a failed
		// one would ask for the prefix twice, an invalid key.
		return kv.KeyValue.ListKeysFiltered(ctx, slices.Clone(filters)...)
	})
}

// list starts a key listing, which goes on reading with ctx after it
// returns: no try of it may have a time limit of its own.
func (kv readingKV) list(ctx context.Context, start func(context.Context) (jetstream.KeyLister, error)) (jetstream.KeyLister, error) {
	var l jetstream.KeyLister
	err := kv.r.run(ctx, kv.what("keys"), func(ctx context.Context) (bool, error) {
		var err error
		l, err = start(ctx)
		return false, err
	})
	return l, err
}

func (kv readingKV) History(ctx context.Context, key string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	return value(ctx, kv.r, kv.what("history of "+key), func(ctx context.Context) ([]jetstream.KeyValueEntry, error) {
		return kv.KeyValue.History(ctx, key, opts...)
	})
}

func (kv readingKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	return value(ctx, kv.r, kv.what("status"), kv.KeyValue.Status)
}
