package bus_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// cluster is a JetStream cluster of in-process nats-servers, for tests that
// put a stream through a leader change.
type cluster struct {
	t     testing.TB
	nodes map[string]*server.Server
	urls  map[string]string
}

// startCluster starts n clustered JetStream servers on loopback and waits
// for a meta leader.
func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	clients, routes := freePorts(t, n), freePorts(t, n)
	var routeURLs []string
	for _, p := range routes {
		routeURLs = append(routeURLs, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	c := &cluster{t: t, nodes: map[string]*server.Server{}, urls: map[string]string{}}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		opts := &server.Options{
			ServerName: name, Host: "127.0.0.1", Port: clients[i], NoSigs: true, NoLog: true,
			JetStream: true, StoreDir: t.TempDir(),
			Cluster: server.ClusterOpts{Name: "kvlive-test", Host: "127.0.0.1", Port: routes[i]},
			Routes:  server.RoutesFromStr(strings.Join(routeURLs, ",")),
		}
		ns, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		c.nodes[name], c.urls[name] = ns, fmt.Sprintf("nats://127.0.0.1:%d", clients[i])
	}
	t.Cleanup(func() {
		for _, ns := range c.nodes {
			ns.Shutdown()
			ns.WaitForShutdown()
		}
	})
	for _, ns := range c.nodes {
		if !ns.ReadyForConnections(30 * time.Second) {
			t.Fatalf("%s not ready", ns.Name())
		}
	}
	// Ready when the meta leader sees every node online with JetStream:
	// before that, placing a replicated stream can fail.
	deadline := time.Now().Add(time.Minute)
	for !slices.ContainsFunc(slices.Collect(maps.Values(c.nodes)), func(ns *server.Server) bool {
		return len(ns.JetStreamClusterPeers()) == n
	}) {
		if time.Now().After(deadline) {
			t.Fatalf("no JetStream meta leader with %d peers after a minute", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

// connect connects to the named nodes only, in that order.
func (c *cluster) connect(names ...string) *nats.Conn {
	c.t.Helper()
	var urls []string
	for _, n := range names {
		urls = append(urls, c.urls[n])
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(), nats.MaxReconnects(-1))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// kill shuts the named node down, as SIGKILL would for what the cluster sees.
func (c *cluster) kill(name string) {
	ns := c.nodes[name]
	ns.Shutdown()
	ns.WaitForShutdown()
}

// others are the node names other than name.
func (c *cluster) others(name string) []string {
	var out []string
	for n := range c.nodes {
		if n != name {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// streamLeader is the node leading stream, once it has one.
func streamLeader(t testing.TB, js jetstream.JetStream, stream string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		s, err := js.Stream(ctx, stream)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(ctx); err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
				return info.Cluster.Leader
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("stream %s has no leader: %v", stream, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
