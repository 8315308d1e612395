package events

// PreviewSubject is where `kvlive switch` asks a running kvlive for its
// preview: a core NATS request, stored nowhere, answered by one replica
// running the planner (planner/preview).
const PreviewSubject = "kvlive.preview"

// The headers of a preview's reply. Each part of the plans carries its
// number (from 1) and the last one also how many there are; a request the
// replica will not plan gets one message with the error (what offline
// planning says of it) or why it is beyond this replica (its namespace).
const (
	HeaderPreviewPart        = "Kvlive-Preview-Part"
	HeaderPreviewParts       = "Kvlive-Preview-Parts"
	HeaderPreviewError       = "Kvlive-Preview-Error"
	HeaderPreviewUnavailable = "Kvlive-Preview-Unavailable"
)

// PreviewRequest is a switch's preview asked of a replica: what
// offline.Request holds, its label selector as text. A replica refuses a
// request with a field it does not know (a newer command's), and the
// command then reads the cluster itself.
type PreviewRequest struct {
	Object         Ref    `json:"object"`
	From           *Ref   `json:"from,omitempty"`
	Namespace      string `json:"namespace,omitempty"`
	Selector       string `json:"selector,omitempty"`
	ForceConflicts bool   `json:"forceConflicts,omitempty"`
}
