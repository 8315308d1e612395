// Package offline answers "what would this change do to the fleet?" without
// writing anything: `kvlive plan` against a cluster, offline over a
// multi-document YAML file loaded into an in-memory cluster, and `kvlive
// replay`'s dry run of stored events against today's cluster. All run the
// same instancetype.PlanVM the planner stage uses, so nothing is decided
// twice.
package offline
