package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"kvlive/drift"
	"kvlive/internal/telemetry"
	"kvlive/readmodel/inspect"
)

//go:embed assets
var assets embed.FS

// Config is what a dashboard reads and acts with.
type Config struct {
	// JetStream reaches kvlive's streams and buckets; its connection's
	// user is the one the buttons act as.
	JetStream jetstream.JetStream
	// ReadOnly serves pages without buttons whatever the user may do.
	ReadOnly bool
	// Token, when set, is the bearer token every request must carry (an
	// Authorization header, or the cookie a first visit with ?token= sets).
	Token string
	// Drift measures drift per instance type from an informer cache; nil
	// when the dashboard has no cluster to read, and the drift page says so.
	Drift func() []drift.Row
	// Tracer traces the undo requests the dashboard publishes; nil traces
	// nothing.
	Tracer trace.TracerProvider
	// By names who steers in control records; the request's remote
	// address is added to it.
	By string
	// Log is where the dashboard says what it did; nil discards.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Metrics counts the live pages closed for taking nothing; nil
	// counts nothing (kvlive dashboard serves no metrics).
	Metrics *telemetry.Metrics
}

// Server is a running dashboard's handler and the live feed it pushes.
type Server struct {
	cfg    Config
	reader *inspect.Reader
	hub    *hub
	views  views
	// renders counts the live views rendered, for tests.
	renders atomic.Uint64
	// writeTimeout is how long a live page may take nothing before it is
	// closed (liveWriteTimeout; shorter in tests).
	writeTimeout time.Duration
	writable     bool
	// why says how the dashboard decided whether to show buttons.
	why string
	mux http.Handler
	// doneKey seals the note an action's redirect carries (sealDone).
	doneKey []byte
}

// New prepares a dashboard: it asks the NATS server what its user may do
// (a reader gets no buttons). Serve it with Handler
// after Start.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.JetStream == nil {
		return nil, errors.New("dashboard: no JetStream")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider()
	}
	if cfg.By == "" {
		cfg.By = "kvlive dashboard"
	}
	s := &Server{cfg: cfg, reader: inspect.NewReader(cfg.JetStream), doneKey: make([]byte, 32),
		views: views{m: map[string]*view{}}, writeTimeout: liveWriteTimeout}
	if _, err := rand.Read(s.doneKey); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	s.writable, s.why = true, "--read-only not set"
	if cfg.ReadOnly {
		s.writable, s.why = false, "--read-only"
	} else {
		s.writable, s.why = mayControl(ctx, cfg.JetStream)
	}
	cfg.Log.Info("dashboard ready", "buttons", s.writable, "because", s.why)
	s.hub = newHub(cfg.JetStream, cfg.Log)
	s.mux = s.routes()
	return s, nil
}

// Start follows kvlive's streams for the live pages until ctx ends.
func (s *Server) Start(ctx context.Context) error { return s.hub.start(ctx) }

// Writable reports whether the dashboard shows buttons, and why.
func (s *Server) Writable() (bool, string) { return s.writable, s.why }

// Handler serves the dashboard.
func (s *Server) Handler() http.Handler { return s.mux }

// routes are the dashboard's pages, live feeds, actions and assets, behind
// the bearer token and, for actions, Go's cross-origin protection.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", cached(http.FileServerFS(static))))
	mux.HandleFunc("GET /{$}", s.rollouts)
	mux.HandleFunc("GET /live/rollouts", s.liveRollouts)
	mux.HandleFunc("GET /rollouts/{id...}", s.rolloutPage)
	mux.HandleFunc("GET /live/rollout/{id...}", s.liveRollout)
	mux.HandleFunc("GET /drift", s.driftPage)
	mux.HandleFunc("GET /dead-letters", s.deadLetters)
	mux.HandleFunc("GET /act/{action}/{id...}", s.confirm)
	mux.HandleFunc("POST /act/{action}/{id...}", s.act)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, "no such page: "+r.URL.Path)
	})
	var h http.Handler = mux
	h = http.NewCrossOriginProtection().Handler(h)
	if s.cfg.Token == "" {
		return s.loopbackHostsOnly(h)
	}
	return s.authenticate(h)
}

// loopbackHostsOnly answers, on a dashboard without a token, only requests
// addressed to a loopback host (localhost, 127.0.0.0/8, [::1]): a page of
// another site whose name its DNS rebinds to 127.0.0.1 is same-origin to
// the browser, so only the Host header it must carry tells it apart (421
// Misdirected Request). A page of another loopback port is cross-origin,
// and Go's cross-origin protection refuses its actions.
func (s *Server) loopbackHostsOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			s.cfg.Log.Warn("dashboard: refused a request for another host", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
			s.fail(w, r, http.StatusMisdirectedRequest, "this dashboard has no token, so it answers only requests for localhost or a loopback address, not "+strconv.Quote(r.Host)+
				"; to reach it by another name, give it a bearer token (--token-file) and TLS")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether the Host header host (with or without a
// port) names the local machine: localhost or a loopback IP address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// cached lets browsers keep the embedded assets for a day.
func cached(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		h.ServeHTTP(w, r)
	})
}

// tokenCookie carries the bearer token after a visit with ?token=.
const tokenCookie = "kvlive-dashboard-token"

// authenticate asks every request for the bearer token, when there is one:
// an Authorization header, or the cookie a visit with ?token= sets (the
// visit is redirected without it, so the token leaves the address bar).
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return next
	}
	want := []byte(s.cfg.Token)
	same := func(got string) bool { return subtle.ConstantTimeCompare([]byte(got), want) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && same(t) {
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: t, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
			q := r.URL.Query()
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && same(bearer) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(tokenCookie); err == nil && same(c.Value) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="kvlive dashboard"`)
		s.fail(w, r, http.StatusUnauthorized, "this dashboard wants its bearer token: open it once with ?token=TOKEN, or send Authorization: Bearer TOKEN")
	})
}

// page serves a whole page write writes.
func page(w http.ResponseWriter, status int, write func(*markup)) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, render(write))
}

// failure is what an error page shows.
type failure struct {
	Status  int
	Title   string
	Message string
}

// fail serves an error page that says what went wrong, never a stack.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if status >= http.StatusInternalServerError {
		s.cfg.Log.Warn("dashboard: a page failed", "path", r.URL.Path, "status", status, "err", msg)
	}
	page(w, status, failure{Status: status, Title: http.StatusText(status), Message: msg}.page)
}
