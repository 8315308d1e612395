package dashboard

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

// userInfoSubject answers a NATS client with its own user and permissions
// (nats-server's $SYS.REQ.USER.INFO, served to every account where the
// server runs its system account).
const userInfoSubject = "$SYS.REQ.USER.INFO"

// userInfoWait bounds the question.
const userInfoWait = 5 * time.Second

// controlSubject is a subject the buttons publish to: a rollout control
// record's (pause, resume, abort and promote all write one).
var controlSubject = "$KV." + events.BucketControl + ".any"

// userInfo is the part of nats-server's answer the dashboard reads.
type userInfo struct {
	Data *struct {
		User        string `json:"user"`
		Permissions *struct {
			Publish *struct {
				Allow []string `json:"allow"`
				Deny  []string `json:"deny"`
			} `json:"publish"`
		} `json:"permissions"`
	} `json:"data"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// mayControl asks the NATS server whether the dashboard's user may write
// rollout control records: a reader may not, and gets no buttons. Where the
// server cannot say (no system account, or a role that may not ask), the
// buttons stay, and NATS refuses what the role does not allow when one is
// pressed: the page then says so.
func mayControl(ctx context.Context, js jetstream.JetStream) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, userInfoWait)
	defer cancel()
	msg, err := js.Conn().RequestWithContext(ctx, userInfoSubject, nil)
	if err != nil {
		return true, "the NATS server did not say what this user may do (" + userInfoSubject + ": " + err.Error() + ")"
	}
	var info userInfo
	switch err := json.Unmarshal(msg.Data, &info); {
	case err != nil:
		return true, "the NATS server's answer to " + userInfoSubject + " did not decode: " + err.Error()
	case info.Error != nil:
		return true, "the NATS server did not say what this user may do: " + info.Error.Description
	case info.Data == nil || info.Data.Permissions == nil || info.Data.Permissions.Publish == nil:
		return true, "the NATS user " + userName(info) + " may publish anything"
	}
	p := info.Data.Permissions.Publish
	if allowed(p.Allow, p.Deny, controlSubject) {
		return true, "the NATS user " + userName(info) + " may write rollout control records"
	}
	return false, "the NATS user " + userName(info) + " may not write rollout control records (a reader)"
}

// userName names the user nats-server described.
func userName(info userInfo) string {
	if info.Data == nil || info.Data.User == "" {
		return "(unnamed)"
	}
	return info.Data.User
}

// allowed applies NATS's publish permissions to subject: allowed when the
// allow list is empty or matches it, and no deny entry does.
func allowed(allow, deny []string, subject string) bool {
	ok := len(allow) == 0
	for _, a := range allow {
		ok = ok || subjectMatches(a, subject)
	}
	for _, d := range deny {
		ok = ok && !subjectMatches(d, subject)
	}
	return ok
}

// subjectMatches reports whether a NATS subject pattern (with * for one
// token and > for the rest) matches subject.
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}
