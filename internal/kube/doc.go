// Package kube holds what kvlive's stages share for talking to Kubernetes:
// clients built from a kubeconfig, and shared informers over the KubeVirt
// kinds, which kubevirt.io/client-go ships no generated informers for.
package kube
