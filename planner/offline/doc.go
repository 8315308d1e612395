// Package whatif answers "what would this change do to the fleet?" without
// writing anything: `kvlive plan` against a cluster, or offline over a
// multi-document YAML file loaded into fake clientsets. Both run the same
// planner.PlanVM the planner stage uses, so nothing is decided twice.
package offline
