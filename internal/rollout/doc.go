// Package rollout starts and follows rollouts from the outside of the
// pipeline: it publishes switch requests, and follows an event's outcomes
// until every planned VM has one, for `kvlive switch --wait` and the demo.
package rollout
