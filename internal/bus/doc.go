// Package bus is kvlive's NATS connection: the embedded JetStream server
// `kvlive run` and the demo start in-process, and the connection every
// process makes to it or to an external server or cluster, with reconnects
// that never give up. Consuming messages is internal/consumer's job.
package bus
