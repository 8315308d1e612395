// Command crdgen writes the KubeVirt CustomResourceDefinitions that kvlive's
// integration tests install into a bare kube-apiserver, in place of a KubeVirt
// installation.
//
// The schemas are not hand-written: they are KubeVirt's own OpenAPI
// definitions (kubevirt.io/client-go/api, GetOpenAPIDefinitions), with every
// reference inlined into one structural schema per kind. The API server then
// validates and prunes kvlive's writes the way a KubeVirt cluster would.
//
// Run from the repository root:
//
//	go run ./deploy/crdgen
//
// The test in this package fails when deploy/crds differs from the output.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

//go:generate go run . -out ../crds

func main() {
	out := flag.String("out", filepath.Join("deploy", "crds"), "directory to write the CRDs and kustomization.yaml into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(out string) error {
	files, err := generate()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("crdgen: %w", err)
	}
	for _, f := range files {
		path := filepath.Join(out, f.name)
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			return fmt.Errorf("crdgen: %w", err)
		}
		fmt.Println("wrote", path)
	}
	return nil
}
