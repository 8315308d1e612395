// Package planner fans each change event or switch request out to every VM
// that references the object, with a live-update plan per VM.
//
// It consumes the events stream through a durable pull consumer, finds the
// referencing VMs through the process's informer index, decides each VM's
// plan with the pure instancetype.PlanVM, publishes one plan message per VM and acks
// the event only after every plan is stored.
package planner
