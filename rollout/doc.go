// Package rollout is everything about one event's rollout seen from the
// outside of the pipeline: starting one (switch requests), steering it
// (pause, resume and abort, as control records written with
// compare-and-set, and the Watch the applier consults before moving a VM),
// and following it until every planned VM has an outcome (`kvlive switch
// --wait`, the demo).
package rollout
