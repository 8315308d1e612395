// Package undo plans moving back the VMs a finished rollout moved: a
// change's VMs to the revisions they were pinned to before it (re-created
// from the change's record if gone), a switch's VMs back to the object they
// were switched from. A VM changed since by someone else is skipped and
// named; an undo is never undone. The planner plans an undo request with
// it, and `kvlive rollout undo` and `kvlive plan --undo` preview it the
// same way.
package undo
