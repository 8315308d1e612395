package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// OpenOptions say which bus a long-running kvlive process uses: an
// external NATS server or cluster at URL, or, without one, an embedded
// server storing JetStream under DataDir and listening on Host:Port.
type OpenOptions struct {
	// Name names the connection (the server's connz shows it).
	Name string
	Log  *slog.Logger
	// URL, when set, is the external server; Auth how to authenticate.
	URL  string
	Auth []nats.Option
	// DataDir, Host, Port and Listen (who may connect and how) configure
	// the embedded server when URL is empty; with DontListen it serves this
	// process alone (a command reading a store). Command names the process
	// in the store's lock (a second process on DataDir fails naming it).
	DataDir, Host string
	Port          int
	DontListen    bool
	Listen        *ListenAuth
	Command       string
	// ReadBound bounds each read's retries (bus.Reads); 0 means ReadBound.
	ReadBound time.Duration
	// Extra are options for kvlive's own connection (an error counter).
	Extra []nats.Option
}

// Opened is a bus in use: the JetStream context every stage shares (reads
// ride out leader elections, bounded by ReadBound), whether the connection
// is up, and what closes it (and the embedded server with its store).
type Opened struct {
	JetStream jetstream.JetStream
	conn      *nats.Conn
	closers   []func() error
}

// Open connects to the external server, or starts the embedded one on its
// store (locked for this process, its URL advertised there for the read
// commands) and connects to it in-process.
func Open(o OpenOptions) (*Opened, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	b := &Opened{}
	var err error
	if o.URL != "" {
		b.conn, err = Connect(o.Name, o.Log, o.URL, append(o.Auth, o.Extra...)...)
	} else {
		err = b.startEmbedded(o)
	}
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	if o.ReadBound <= 0 {
		o.ReadBound = ReadBound
	}
	if b.JetStream, err = NewJetStream(b.conn, o.ReadBound, jetstream.WithPublishAsyncMaxPending(4096)); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// startEmbedded locks the store, starts the server and connects to it.
func (b *Opened) startEmbedded(o OpenOptions) error {
	store, err := OpenStore(o.DataDir)
	if err != nil {
		return err
	}
	b.closers = append(b.closers, store.Close)
	ns, err := StartEmbedded(EmbeddedOptions{StoreDir: o.DataDir, Host: o.Host, Port: o.Port, DontListen: o.DontListen, Auth: o.Listen})
	if err != nil {
		return err
	}
	b.closers = append([]func() error{func() error { ns.Shutdown(); ns.WaitForShutdown(); return nil }}, b.closers...)
	var self []nats.Option
	if o.Listen != nil {
		self = o.Listen.Self()
		o.Log.Info("embedded NATS server requires authorization", "config", o.Listen.Path, "tls", o.Listen.TLS())
	}
	url := LocalURL(ns)
	if o.DontListen {
		url = "" // served to no other process
	}
	if err := store.Advertise(o.Command, url); err != nil {
		o.Log.Warn("the store does not say where it is served; read commands will need --nats-url", "err", err)
	}
	o.Log.Info("embedded NATS server started", "url", url, "store", o.DataDir)
	b.conn, err = ConnectEmbedded(ns, o.Name, o.Log, append(self, o.Extra...)...)
	return err
}

// Ready reports whether the connection is up, for /readyz.
func (b *Opened) Ready() error {
	if b.conn == nil || !b.conn.IsConnected() {
		status := "not connected"
		if b.conn != nil {
			status = b.conn.Status().String()
		}
		return fmt.Errorf("NATS %s", status)
	}
	return nil
}

// Close drains the connection, then stops the embedded server and
// releases its store.
func (b *Opened) Close() error {
	var errs []error
	if b.conn != nil {
		errs = append(errs, b.conn.Drain())
	}
	for _, c := range b.closers {
		errs = append(errs, c())
	}
	b.conn, b.closers = nil, nil
	return errors.Join(errs...)
}
