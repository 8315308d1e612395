// Package dashboard serves kvlive's web dashboard: the rollouts newest
// first, a rollout's batches, gates, VMs (prediction next to KubeVirt's
// verdict) and trace, drift per instance type and the dead letters, live
// while rollouts run, and the operator's pause, resume, promote, abort and
// undo, each after a confirmation.
//
// It reads kvlive's own records over NATS (the read models of
// readmodel/inspect, as `kvlive rollouts | outcomes | trace | rollout
// status` do) and never lists the API server for a page: drift comes from
// an informer cache the caller hands in. Pages are Go templates rendered on
// the server; htmx (embedded, with its server-sent events extension) swaps
// a rollout's live part in as the records change, pushed from ordered
// consumers on the streams, not polled. Buttons act as the CLI does, under
// the dashboard's NATS user: a user the server says may not write
// rollout control records (a reader) gets pages without buttons.
package dashboard
