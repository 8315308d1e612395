package events

import (
	"errors"
	"time"

	"github.com/google/uuid"
)

// TypeRestartRequested is the CloudEvents type of a restart request.
const TypeRestartRequested = "io.kvlive.restart.requested.v1"

// DoNotDisruptAnnotation, "true" on a VM, keeps kvlive from restarting it:
// its restart plan is a skip that says so.
const DoNotDisruptAnnotation = "kvlive.io/do-not-disrupt"

// RestartRequest asks to restart the running VMs of an instance type or
// preference that wait for a restart (KubeVirt's RestartRequired), the way
// virt-api's restart does: a Stop naming the running VMI, then a Start, in
// the VM's status.stateChangeRequests, which virt-controller carries out.
type RestartRequest struct {
	ID string `json:"id"`
	// Object is the instance type or preference whose VMs are restarted.
	Object Ref `json:"object"`
	// Namespace limits the restart to one namespace; empty means all.
	Namespace string `json:"namespace,omitempty"`
	// Selector is a label selector over VMs; empty selects every VM.
	Selector    string    `json:"selector,omitempty"`
	RequestedAt time.Time `json:"requestedAt"`
	// Policy, when set, is how the restart rolls out (kvlive restart's
	// flags); otherwise the object's or the planner's default applies. Its
	// restartBudget caps the VMs restarting at once.
	Policy *Policy `json:"policy,omitempty"`
	// Only, when set, limits the restart to the VMs with these UIDs.
	Only []string `json:"only,omitempty"`
	// After, on the restart a rollout of policy restart: pending asks for
	// once it has settled, is that rollout's event id.
	After string `json:"after,omitempty"`
}

// RestartAfterID is the request id of the restart that follows rollout
// eventID (policy restart: pending): one id per rollout, so the request is
// published once however many replicas, or sweeps, ask for it.
func RestartAfterID(eventID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://kvlive.io/restart-after/"+eventID)).String()
}

// Validate checks the request names itself and an object.
func (r *RestartRequest) Validate() error {
	switch {
	case r.ID == "":
		return errors.New("id is required")
	case r.Object.Kind == "" || r.Object.Name == "":
		return errors.New("object must name a kind and a name")
	}
	if _, err := NormalizeKind(r.Object.Kind, false); err != nil {
		return err
	}
	if r.Policy != nil {
		return r.Policy.Validate()
	}
	return nil
}

// RestartEventID is the id of a restart request: restart/<uuid>.
func RestartEventID(requestID string) string { return "restart/" + requestID }

// NewRestartID is a fresh restart request id.
func NewRestartID() string { return uuid.NewString() }

// RestartSubject is where restart requests are published.
func RestartSubject() string { return subjectEvents + ".restart" }
