package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"kvlive/events"
	"kvlive/readmodel/inspect"
	"kvlive/readmodel/replay"
	"kvlive/rollout"
	"kvlive/undo"
)

// actionWords say what each button does, on its confirmation page.
var actionWords = map[string]string{
	"pause":   "Hold the rollout's plans: no more VMs move until it is resumed. VMs already moved stay moved.",
	"resume":  "Send the rollout's held plans back to the applier: VMs move again, as the policy paces them.",
	"promote": "Release the next batch now, whatever the released batch's gate says and however long its pause has to run.",
	"abort":   "Stop the rollout for good: VMs not yet moved are skipped, each with an outcome saying so. VMs already moved stay moved.",
	"undo":    "Move every VM the rollout moved back where it was, as a rollout of its own that a running kvlive plans against the cluster (VMs changed since are skipped and named).",
}

// confirmView is an action's confirmation page.
type confirmView struct {
	Action, ID, Words, Progress string
	// Batch, on a promote's page, is the batch it releases (counted from
	// 1): the form names it, so two pages confirmed at once release one.
	Batch int
}

// confirm asks before an action: nothing is sent until the form it serves
// is posted.
func (s *Server) confirm(w http.ResponseWriter, r *http.Request) {
	action, id := r.PathValue("action"), r.PathValue("id")
	if !s.mayAct(w, r, action) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readBound)
	defer cancel()
	a, err := s.reader.Status(ctx, id)
	switch {
	case errors.Is(err, rollout.ErrNoRollout) || errors.Is(err, rollout.ErrBadEventID):
		s.fail(w, r, http.StatusNotFound, "no rollout "+id+" is recorded")
		return
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, err.Error())
		return
	}
	v := confirmView{Action: action, ID: a.EventID, Words: actionWords[action], Progress: inspect.ProgressLine(a)}
	if action == "promote" && a.Batch+1 < len(a.Batches) {
		v.Batch = a.Batch + 2
		v.Words = fmt.Sprintf("Release batch %d of %d (%d VMs) now, whatever batch %d's gate says and however long its pause has to run.",
			v.Batch, len(a.Batches), a.Batches[a.Batch+1], a.Batch+1)
	}
	page(w, http.StatusOK, v.page)
}

// act carries a confirmed action out as the CLI does, under the
// dashboard's NATS user, and goes back to the rollout's page saying what
// became of it.
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	action, id := r.PathValue("action"), r.PathValue("id")
	if !s.mayAct(w, r, action) {
		return
	}
	by := s.cfg.By + " from " + r.RemoteAddr
	ctx, cancel := context.WithTimeout(r.Context(), readBound)
	defer cancel()
	batch := 0
	if b := r.PostFormValue("batch"); b != "" {
		n, err := strconv.Atoi(b)
		if err != nil || n < 2 {
			s.fail(w, r, http.StatusBadRequest, "promote: batch "+strconv.Quote(b)+" is no batch to release (2 or later)")
			return
		}
		batch = n
	}
	done, to, err := s.carryOut(ctx, action, id, r.PostFormValue("reason"), batch, by)
	switch {
	case errors.Is(err, rollout.ErrNoRollout) || errors.Is(err, rollout.ErrBadEventID):
		s.fail(w, r, http.StatusNotFound, "no rollout "+id+" is recorded")
		return
	case err != nil:
		s.cfg.Log.Warn("dashboard: an action failed", "action", action, "event", id, "by", by, "err", err)
		s.fail(w, r, http.StatusConflict, fmt.Sprintf("%s %s: %v", action, id, err))
		return
	}
	s.cfg.Log.Info("dashboard: "+action, "event", id, "by", by, "result", done)
	http.Redirect(w, r, "/rollouts/"+inspect.EventPath(to)+"?"+s.sealDone(done).Encode(), http.StatusSeeOther)
}

// carryOut sends one action and says what it did, and which rollout's page
// shows it (an undo's own).
func (s *Server) carryOut(ctx context.Context, action, id, reason string, batch int, by string) (done, to string, err error) {
	js, now := s.cfg.JetStream, s.cfg.Now()
	switch action {
	case "pause", "resume", "abort":
		st, err := rollout.Steer(ctx, js, rollout.Steering{EventID: id, Action: events.ControlAction(action), Reason: reason, By: by}, now)
		if err != nil {
			return "", id, err
		}
		if !st.Changed {
			return fmt.Sprintf("%s was already %s", st.EventID, st.Control.State), st.EventID, nil
		}
		return fmt.Sprintf("%s %s by %s", st.EventID, st.Control.State, by), st.EventID, nil
	case "promote":
		p, err := rollout.PromoteNext(ctx, js, id, batch, by, now)
		if err != nil {
			return "", id, err
		}
		return fmt.Sprintf("batch %d of %d released (%d VMs) by %s", p.Batch+1, len(p.Batches), p.Batches[p.Batch], by), p.EventID, nil
	case "undo":
		full, err := rollout.ResolveEventID(ctx, js, id)
		if err != nil {
			return "", id, err
		}
		orig, err := undo.Read(ctx, js, full)
		if err != nil {
			return "", id, err
		}
		u, err := replay.Publisher{JetStream: js, Tracer: s.cfg.Tracer, Now: s.cfg.Now}.Undo(ctx, orig.Event, events.UndoEventID(events.NewUndoID()), nil)
		if err != nil {
			return "", id, err
		}
		return fmt.Sprintf("undo requested by %s: %s undoes %s", by, u.EventID, full), u.EventID, nil
	}
	return "", id, fmt.Errorf("no action %q", action)
}

// mayAct refuses an unknown action (404) and any action on a dashboard
// without buttons (403, saying why).
func (s *Server) mayAct(w http.ResponseWriter, r *http.Request, action string) bool {
	if _, ok := actionWords[action]; !ok || !slices.Contains([]string{"pause", "resume", "promote", "abort", "undo"}, action) {
		s.fail(w, r, http.StatusNotFound, "no action "+action+": the dashboard pauses, resumes, promotes, aborts and undoes")
		return false
	}
	if !s.writable {
		s.fail(w, r, http.StatusForbidden, "this dashboard only reads: "+s.why)
		return false
	}
	return true
}

// sealDone is the query that carries an action's note to the page the
// action redirects to: the note and its HMAC under a key of this process.
// The page shows a note only with its seal (doneNote), so a link from
// elsewhere cannot make the dashboard say an action was taken.
func (s *Server) sealDone(note string) url.Values {
	return url.Values{"done": {note}, "seal": {s.seal(note)}}
}

// doneNote is the note of the query, or "" where it carries none sealed
// by this process (a forged link, or one from before a restart).
func (s *Server) doneNote(q url.Values) string {
	note := q.Get("done")
	if note == "" || !hmac.Equal([]byte(q.Get("seal")), []byte(s.seal(note))) {
		return ""
	}
	return note
}

func (s *Server) seal(note string) string {
	m := hmac.New(sha256.New, s.doneKey)
	m.Write([]byte(note))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
