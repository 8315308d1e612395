// Package fleet is the planner's and applier's shared view of the cluster:
// informers over VMs (indexed by the instance types and preferences they
// reference), VMIs, the KubeVirt CR, instancetype ControllerRevisions and
// the instancetype/preference objects, with the lookups both stages need.
// One Fleet serves both stages in one process, so the cluster is listed once.
package fleet
