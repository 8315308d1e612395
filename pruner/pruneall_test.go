package pruner_test

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/internal/testenv"
	"kvlive/pruner"
)

// TestPruneAllDeletesWhatFindListed: with retention 0, the revisions Find
// lists are deleted and every other one stays.
func TestPruneAllDeletesWhatFindListed(t *testing.T) {
	owned, clients := historyClients(t)
	c := testenv.StartCache(t, clients)
	ctx := context.Background()
	cands, problems := pruner.Find(c, "", 0)
	if len(cands) != 4 || len(problems) != 0 {
		t.Fatalf("Find: %d candidates, problems %v; want 4", len(cands), problems)
	}
	d, err := pruner.PruneAll(ctx, clients, c, cands, 0, 2)
	if err != nil || len(d.Revisions) != 4 || len(d.Kept) != 0 {
		t.Fatalf("PruneAll: deleted %d, kept %d, %v; want the 4 deleted", len(d.Revisions), len(d.Kept), err)
	}
	gone := map[string]bool{}
	for _, cand := range cands {
		gone[cand.Revision] = true
	}
	for _, cr := range owned {
		_, err := clients.Kube.AppsV1().ControllerRevisions("ns").Get(ctx, cr.Name, metav1.GetOptions{})
		if deleted := apierrors.IsNotFound(err); deleted != gone[cr.Name] {
			t.Errorf("%s: deleted %t, want %t (%v)", cr.Name, deleted, gone[cr.Name], err)
		}
	}
}
