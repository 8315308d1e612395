// Package inspect reads back what kvlive recorded in JetStream, for the
// people asking "what happened to my VMs?": the outcome of every VM
// (`kvlive outcomes`), the events and how far each got (`kvlive events`),
// one event's trace drawn as a waterfall in the terminal (`kvlive trace`),
// and the dead letters (`kvlive dlq`): messages a stage could not decode or
// gave up on, kept with the reason, where they came from and their headers.
//
// It only reads. Every query runs an ordered consumer from the start of the
// stream (or a start sequence) and stops once it has read every message that
// was stored when it began, so a query returns even while kvlive keeps
// publishing. Nothing is created on the server but those short-lived
// ephemeral consumers.
package inspect
