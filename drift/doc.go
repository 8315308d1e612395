// Package drift answers "did every VM get the change" from the cluster
// alone: per instance type and preference, how many of the VMs that
// reference it are pinned to its latest generation, how many generations
// the others lag, how many carry KubeVirt's RestartRequired condition and
// how many are stopped, so that what they are pinned to waits for their
// next boot. It reads the informer cache (VMs, VMIs, ControllerRevisions,
// the objects), never kvlive's records, so it also sees VMs kvlive never
// moved and moves made by hand. `kvlive drift` prints it; `kvlive run`
// exports its behind counts as kvlive_vms_behind{object}.
package drift
