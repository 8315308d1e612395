//go:build integration

package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// kvliveUserAgent starts the user agent of every request the kvlive binary
// makes: client-go's default, named after the executable. The stand-in and
// the test itself run in the test binary, whose user agent differs.
const kvliveUserAgent = "kvlive/"

// auditEvent is the part of an API server audit event the tests read.
type auditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	ObjectRef  struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	// RequestObject is the patch as sent (the policy logs at Request level).
	RequestObject  json.RawMessage `json:"requestObject"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// Received and Done bound the request in the API server.
	Received time.Time `json:"requestReceivedTimestamp"`
	Done     time.Time `json:"stageTimestamp"`
}

// vmWrites are kvlive's patches of one VM (or its status) by how the API
// server answered them.
type vmWrites struct {
	// ok were carried out: 200 at ResponseComplete.
	ok int
	// untested lists carried-out patches that replace a value without
	// testing it first: kvlive must never overwrite a VM blindly.
	untested []string
	// cutOff ended in a server-side error: when kvlive is killed
	// mid-request the API server answers 504 "context canceled". The
	// storage write may or may not have happened.
	cutOff int
}

// applied is how many of the patches took effect. A cut-off patch counts
// when no patch was carried out: the caller checks the VM is at its target,
// which only that patch can have done. With one patch carried out, a
// cut-off one did not take effect, or the later patch's test op would have
// failed.
func (w vmWrites) applied() int {
	if w.ok == 0 && w.cutOff > 0 {
		return 1
	}
	return w.ok
}

// kvlivePatches reads kvlive's answered patches of VMs and their status
// from the audit log, in the order the API server logged them.
func (e *env) kvlivePatches() []auditEvent {
	e.t.Helper()
	return e.kvliveRequests("patch", "virtualmachines")
}

// kvliveRequests reads kvlive's answered requests of verb on resource from
// the audit log, in the order the API server logged them.
func (e *env) kvliveRequests(verb, resource string) []auditEvent {
	e.t.Helper()
	return slices.DeleteFunc(e.auditEvents(verb, resource), func(ev auditEvent) bool { return !strings.HasPrefix(ev.UserAgent, kvliveUserAgent) })
}

// auditEvents reads everyone's answered requests of verb on resource from
// the audit log, in the order the API server logged them.
func (e *env) auditEvents(verb, resource string) []auditEvent {
	e.t.Helper()
	return slices.DeleteFunc(e.auditStage("ResponseComplete", verb, resource), func(ev auditEvent) bool { return ev.ResponseStatus == nil })
}

// auditStage reads everyone's requests of verb on resource that reached
// stage (a watch logs ResponseStarted when it starts streaming and
// ResponseComplete only when it ends), in the order the API server logged
// them.
func (e *env) auditStage(stage, verb, resource string) []auditEvent {
	e.t.Helper()
	f, err := os.Open(e.auditLog)
	if err != nil {
		e.t.Fatalf("audit log: %v", err)
	}
	defer func() { _ = f.Close() }()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // the last line may be half written while the server runs
		}
		if ev.Stage == stage && ev.Verb == verb && ev.ObjectRef.Resource == resource {
			out = append(out, ev)
		}
	}
	if err := sc.Err(); err != nil {
		e.t.Fatalf("audit log: %v", err)
	}
	return out
}

// kvliveWrites reads kvlive's patches of VMs and their status from the
// audit log, per VM (namespace/name).
func (e *env) kvliveWrites() map[string]vmWrites {
	e.t.Helper()
	writes := map[string]vmWrites{}
	for _, ev := range e.kvlivePatches() {
		key := ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name
		w := writes[key]
		switch {
		case ev.ResponseStatus.Code == 200:
			w.ok++
			if !testsWhatItReplaces(ev.RequestObject) {
				w.untested = append(w.untested, string(ev.RequestObject))
			}
		case ev.ResponseStatus.Code >= 500:
			w.cutOff++
		}
		writes[key] = w
	}
	return writes
}

// testsWhatItReplaces reports whether a JSON patch tests every path it
// replaces before replacing it, or a server-side apply names the
// resourceVersion it was decided on, as kvlive's writes must (a concurrent
// change then fails the write instead of being overwritten).
func testsWhatItReplaces(patch json.RawMessage) bool {
	var apply struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(patch, &apply) == nil {
		// A server-side apply (a switch) tests the whole VM: it names the
		// resourceVersion it was decided on.
		return apply.Metadata.ResourceVersion != ""
	}
	var ops []struct {
		Op   string `json:"op"`
		Path string `json:"path"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		return false // not a JSON patch
	}
	tested := map[string]bool{}
	for _, o := range ops {
		switch o.Op {
		case "test":
			tested[o.Path] = true
		case "replace":
			if !tested[o.Path] {
				return false
			}
		}
	}
	return len(tested) > 0
}

// checkWrites asserts, from the audit log, that kvlive wrote each moved VM
// exactly once, with a patch that tests what it replaces, and never wrote
// the others. It first waits until every moved
// VM's write is in the log, so a write still being logged is not missed.
func (e *env) checkWrites(moved, untouched []vmShape) {
	e.t.Helper()
	var writes map[string]vmWrites
	e.waitFor("kvlive's writes in the audit log", time.Minute, func() (bool, string) {
		writes = e.kvliveWrites()
		missing := 0
		for _, s := range moved {
			if writes[s.key()].applied() == 0 {
				missing++
			}
		}
		return missing == 0, plural(missing, "moved VM") + " without a write in the audit log"
	})
	var problems []string
	for _, s := range moved {
		if w := writes[s.key()]; w.applied() != 1 {
			problems = append(problems, fmt.Sprintf("%s: kvlive patched it %d times (%+v), want exactly once", s.key(), w.applied(), w))
		}
		if w := writes[s.key()]; len(w.untested) > 0 {
			problems = append(problems, fmt.Sprintf("%s: kvlive replaced without a test op: %s", s.key(), w.untested))
		}
	}
	for _, s := range untouched {
		if w := writes[s.key()]; w.applied() != 0 {
			problems = append(problems, fmt.Sprintf("%s: kvlive patched it %d times (%+v), want never", s.key(), w.applied(), w))
		}
	}
	report(e.t, "writes per VM (audit log)", problems)
	if len(problems) > 0 {
		e.auditTrail(problems[0][:strings.Index(problems[0], ":")])
	}
}

// checkNextBootWritesAsRead asserts, from the audit log, that each write
// of kvlive's that the API server carried out on a VM in nextBoot (keys)
// tested the resourceVersion the VM was read at: a start asked for after
// the read fails the move, which is decided again (applier.AsRead).
func (e *env) checkNextBootWritesAsRead(nextBoot []string) {
	e.t.Helper()
	want := map[string]bool{}
	for _, k := range nextBoot {
		want[k] = true
	}
	var problems []string
	seen := 0
	for _, ev := range e.kvlivePatches() {
		key := ev.ObjectRef.Namespace + "/" + ev.ObjectRef.Name
		if !want[key] || ev.ResponseStatus == nil || ev.ResponseStatus.Code != 200 {
			continue
		}
		seen++
		var ops []struct {
			Op, Path string
			Value    any
		}
		if err := json.Unmarshal(ev.RequestObject, &ops); err != nil || len(ops) == 0 ||
			ops[0].Op != "test" || ops[0].Path != "/metadata/resourceVersion" || ops[0].Value == "" {
			problems = append(problems, fmt.Sprintf("%s: a next-boot move written without testing the resourceVersion: %s", key, ev.RequestObject))
		}
	}
	if seen == 0 && len(nextBoot) > 0 {
		problems = append(problems, fmt.Sprintf("none of the %d next-boot moves' writes is in the audit log", len(nextBoot)))
	}
	report(e.t, "next-boot writes as read (audit log)", problems)
}

// auditTrail logs every audit event recorded for one VM, for diagnosis.
func (e *env) auditTrail(key string) {
	e.t.Helper()
	b, err := os.ReadFile(e.auditLog)
	if err != nil {
		e.t.Fatalf("audit log: %v", err)
	}
	ns, name, _ := strings.Cut(key, "/")
	var lines []string
	for _, line := range strings.Split(string(b), "\n") {
		var ev auditEvent
		if json.Unmarshal([]byte(line), &ev) == nil && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == name {
			lines = append(lines, line)
		}
	}
	e.t.Logf("audit events of %s:\n%s", key, strings.Join(lines, "\n"))
}
