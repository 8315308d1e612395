// Package natsutil starts kvlive's embedded NATS server and connects the
// stages to it, or to an external server or cluster.
package bus
