package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"kvlive/internal/printer"
)

// versionInfo is what `kvlive version` reports, read from the binary's
// build information.
type versionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Time    string `json:"commitTime,omitempty"`
	// Modified is true when the binary was built from a tree with changes.
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	// KubeVirtAPI is the kubevirt.io/api module kvlive was built with: the
	// KubeVirt API it speaks (kubevirt.io/v1, instancetype.kubevirt.io/v1beta1).
	KubeVirtAPI string `json:"kubevirtAPI"`
}

func readVersion() versionInfo {
	v := versionInfo{Version: "(unknown)"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Version, v.Go = info.Main.Version, info.GoVersion
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	for _, d := range info.Deps {
		if d.Path == "kubevirt.io/api" {
			v.KubeVirtAPI = d.Version
			if d.Replace != nil {
				v.KubeVirtAPI = d.Replace.Version
			}
		}
	}
	return v
}

// versionOptions are kvlive version's flags.
type versionOptions struct {
	output printer.Format
	out    io.Writer
}

func newVersionCmd() *cobra.Command {
	o := &versionOptions{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print kvlive's version, commit and the KubeVirt API it speaks",
		Args:  cobra.NoArgs,
		RunE:  runE(o),
	}
	printer.AddFlag(cmd, &o.output, printer.FormatTable, printer.FormatJSON, printer.FormatYAML)
	return cmd
}

func (o *versionOptions) Complete(cmd *cobra.Command, _ []string) error {
	o.out = cmd.OutOrStdout()
	return nil
}

func (o *versionOptions) Validate() error { return nil }

// Run prints what the binary was built from.
func (o *versionOptions) Run(context.Context) error {
	v := readVersion()
	if !o.output.Human() {
		return printer.WriteData(o.out, o.output, v)
	}
	commit := v.Commit
	if commit == "" {
		commit = "(not recorded)"
	} else if v.Modified {
		commit += " (modified)"
	}
	_, err := fmt.Fprintf(o.out, "kvlive %s\ncommit: %s\ngo: %s\nKubeVirt API: kubevirt.io/api %s (kubevirt.io/v1, instancetype.kubevirt.io/v1beta1)\n",
		v.Version, commit, v.Go, v.KubeVirtAPI)
	return err
}
