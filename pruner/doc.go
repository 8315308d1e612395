// Package pruner deletes the instancetype ControllerRevisions kvlive
// created and then superseded. Every move leaves the VM's previous revision
// behind (KubeVirt deletes them only with the VM), so a fleet edited often
// keeps one revision per VM per edit in etcd and in every informer cache.
//
// Only a revision kvlive created (instancetype.CreatedByLabel), owned by
// the VM as its controller and named as KubeVirt names it is ever deleted,
// and never one that a VM is pinned to, that the VM's running VMI started
// from, that is newer than the VM's pin (a move may be on its way to it),
// or that is among the Retention newest the VM's pin superseded (undo needs
// the previous one). Each deletion is checked against the VM as the API
// server has it just before, and carries the revision's UID and
// resourceVersion as preconditions.
package pruner
