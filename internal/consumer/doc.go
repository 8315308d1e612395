// Package consumer is the one runtime every kvlive stage uses to consume a
// JetStream durable pull consumer and settle each message it delivers.
//
// It exists because the decision "ack, retry later, or give up with a
// reason" used to be written once per stage (the planner, the applier and
// the release of held plans), each with its own delays and its own edge
// cases: a dead letter that could not be stored, a shutdown that looked like
// a failure, a handler slower than AckWait. Here a handler only says what
// happened, as a Fate (Done, Retry or Poison), and Runtime.Settle is the
// single place that turns a fate into an ack, a delayed nak, or a dead
// letter followed by a term.
//
// # Delivery budget
//
// The runtime, not the server, decides when to give up on a message: set the
// consumer's MaxDeliver to -1 (unlimited) on the server and Config.MaxDeliver
// to the budget. A server-side limit would drop a message silently once it
// is reached, even when its dead letter could not be stored; the runtime
// instead keeps naking such a message, and retrying the dead letter, until
// the copy is safe in the dead-letter stream.
//
// # Heartbeats and shutdown
//
// While a handler runs, the runtime tells the server the message is still
// in progress every AckWait/3, so a handler waiting on a rate limiter or a
// slow API server never causes a redelivery. Messages are fetched only for
// free workers, so none waits, unheartbeated, in a client buffer behind busy
// ones while its AckWait runs out. When the context given to
// Runtime.Run ends, the runtime stops fetching, lets in-flight handlers
// finish (for at most Config.Grace), settles them, and only then returns. A
// Retry caused by the shutdown becomes a short nak, never a dead letter.
package consumer
