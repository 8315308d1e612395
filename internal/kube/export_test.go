package kube

// OwnerBucket lets the external tests find UIDs that share an owner-index
// bucket.
var OwnerBucket = ownerBucket

// RevisionsOf and GenerationsOf let the external tests read the selector
// a one-shot plan's revision informer lists with.
var (
	RevisionsOf   = revisionsOf
	GenerationsOf = generationsOf
)
