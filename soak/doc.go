// Package soak is kvlive's randomized fault soak: the whole pipeline in
// one process (two or three replicas of `kvlive run` on one bus, the
// virt-controller stand-in, an in-memory API server), driven through a
// schedule of rollouts, operator steps and faults drawn from one seed, and
// judged afterwards from the API server's own write log and kvlive's
// records. See docs/testing.md ("The fault soak") for what it draws, what
// it checks, and what it cannot express yet.
//
//	go test ./soak/                          the fixed seeds CI runs
//	go test ./soak/ -run TestSoak -v -soak.seed=42   replay one seed
//	hack/soak.sh 1000                        many seeds, in the background
package soak
