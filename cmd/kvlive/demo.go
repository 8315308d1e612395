package main

import (
	"context"
	"path/filepath"

	"github.com/spf13/cobra"

	"kvlive/cmd/kvlive/demo"
	"kvlive/internal/printer"
)

// demoOptions are kvlive demo's flags: the demo's own configuration.
type demoOptions struct {
	g   *globals
	cfg demo.Config
}

func newDemoCmd(g *globals) *cobra.Command {
	o := &demoOptions{g: g, cfg: demo.Config{Fleet: demo.DefaultOptions(), Workers: 16, Progress: true}}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline on an in-memory cluster: edit an instance type, then switch VMs",
		Long: `demo runs kvlive end to end with nothing installed: an in-memory cluster seeded
with a fleet of VMs, a stand-in for KubeVirt's virt-controller, an embedded NATS
server, and kvlive's watcher, planner and applier. It edits an instance type,
then switches part of the fleet to another one, and checks every VM's result.`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	cfg := &o.cfg
	f := cmd.Flags()
	f.IntVar(&cfg.Fleet.VMs, "vms", cfg.Fleet.VMs, "number of VMs in the demo fleet")
	f.IntVar(&cfg.Fleet.Namespaces, "namespaces", cfg.Fleet.Namespaces, "number of namespaces the fleet spreads over")
	f.IntVar(&cfg.Fleet.RunningPercent, "running-percent", cfg.Fleet.RunningPercent, "percentage of VMs that are running")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "applier workers")
	f.StringVar(&cfg.DataDir, "data-dir", filepath.Join(defaultDataDir(), "demo"), "JetStream store of the demo, kept for kvlive trace/outcomes/events (its JetStream data emptied at each run; a non-empty directory kvlive did not make is refused)")
	f.BoolVar(&cfg.Progress, "progress", cfg.Progress, "draw progress bars (default: when the output is a terminal; otherwise a line per rollout)")
	return cmd
}

// Complete quiets the logs (the demo's own output tells the story, unless
// --log-level asks for more), and draws progress bars on a terminal unless
// --progress says otherwise.
func (o *demoOptions) Complete(cmd *cobra.Command, _ []string) error {
	if o.g.logLevel == "info" {
		o.g.logLevel = "error"
	}
	o.cfg.Log = o.g.logger()
	o.cfg.Out = cmd.OutOrStdout()
	o.cfg.Command = invokedAs()
	if !cmd.Flags().Changed("progress") {
		o.cfg.Progress = printer.IsTerminal(o.cfg.Out)
	}
	return nil
}

func (o *demoOptions) Validate() error { return o.cfg.Validate() }

// Run plays the demo.
func (o *demoOptions) Run(ctx context.Context) error { return demo.Run(ctx, o.cfg) }
