package offline

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	"kvlive/instancetype"
	"kvlive/readmodel/replay"
)

// Preview is what one stored event would do today.
type Preview struct {
	Event replay.Stored `json:"-"`
	// Note says how today differs from when the event was recorded.
	Note   string `json:"note,omitempty"`
	Report Report `json:"plan"`
}

// DryRun plans each event against the cluster as it is now, writing nothing.
func DryRun(f Fleet, stored []replay.Stored) ([]Preview, error) {
	out := make([]Preview, 0, len(stored))
	for _, s := range stored {
		req, note, err := request(f, s)
		if err != nil {
			return nil, err
		}
		if _, ok := instancetype.SpecOf(f.Object(req.Object)); !ok {
			if s.Change != nil {
				// As replay --apply answers: a change replays as its
				// object's current generation, and there is none.
				return nil, fmt.Errorf("replay: %s no longer exists: nothing to replay for %s", req.Object, s.ID)
			}
			out = append(out, Preview{Event: s, Note: fmt.Sprintf("%s no longer exists: replaying this switch moves no VM", req.Object), Report: NewReport(nil)})
			continue
		}
		plans, err := Plan(f, req)
		if err != nil {
			return nil, err
		}
		out = append(out, Preview{Event: s, Note: note, Report: NewReport(plans)})
	}
	return out, nil
}

// request is the what-if question a stored event asks today.
func request(f Fleet, s replay.Stored) (Request, string, error) {
	if s.Switch != nil {
		sel, err := labels.Parse(s.Switch.Selector)
		if err != nil {
			return Request{}, "", fmt.Errorf("replay: event %s: selector: %w", s.ID, err)
		}
		from := s.Switch.From
		return Request{Object: s.Switch.To, From: &from, Namespace: s.Switch.Namespace, Selector: sel}, "", nil
	}
	return Request{Object: s.Change.Object, Selector: labels.Everything()}, replay.SupersededNote(f, *s.Change), nil
}
