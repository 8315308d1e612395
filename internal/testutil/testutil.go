// Package testutil holds helpers for kvlive's unit tests: an embedded
// JetStream server per test and fake clientsets seeded with objects.
package testutil

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/natsutil"
)

// JetStream starts an embedded, in-process NATS server with kvlive's
// streams, consumers and buckets, stopped when the test ends.
func JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	ns, err := natsutil.StartEmbedded(natsutil.EmbeddedOptions{StoreDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsutil.ConnectEmbedded(ns, t.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(); ns.Shutdown(); ns.WaitForShutdown() })
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Setup(context.Background(), js, events.DefaultStreamOptions()); err != nil {
		t.Fatal(err)
	}
	return js
}

// FakeClients returns fake clientsets holding objs (KubeVirt kinds to the
// KubeVirt clientset, everything else to the core one).
func FakeClients(kubeObjs []runtime.Object, virtObjs ...runtime.Object) kube.Clients {
	return kube.NewInMemory(kubeObjs, virtObjs...)
}
