// Package rollout is rollout control, in one place: an event's rollout
// record and the VMs it planned, its accounting, switch requests, steering
// (pause, resume, abort and promote, as control records written with
// compare-and-set, and the Watch the applier consults before moving a VM),
// following it until every planned VM has an outcome (`kvlive switch
// --wait`, the demo), and the two loops the pipeline runs: the Controller
// beside every applier, which steps batched rollouts through their gates
// and releases held and staged plans, and the Keeper beside every planner,
// which marks settled rollouts and ages their records out.
package rollout
