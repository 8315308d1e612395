package kube

// OwnerBucket lets the external tests find UIDs that share an owner-index
// bucket.
var OwnerBucket = ownerBucket
