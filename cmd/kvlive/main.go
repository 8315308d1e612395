// Command kvlive rolls KubeVirt instance type and preference changes out to
// the VMs that use them, live where KubeVirt can, with a traced outcome per VM.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	// Restart windows name IANA time zones; a container image may have no
	// zoneinfo of its own.
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kvlive:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &globals{}
	err := newRootWith(g).ExecuteContext(ctx)
	return errors.Join(err, g.profile.stop())
}

// globals are the flags every command shares.
type globals struct {
	logLevel string
	profile  profiling
}

// validate rejects a --log-level slog does not know.
func (g *globals) validate() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, g.logLevel)
	}
	return nil
}

func (g *globals) logger() *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	klog.SetSlogLogger(log)
	return log
}

func newRoot() *cobra.Command { return newRootWith(&globals{}) }

func newRootWith(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "kvlive",
		Short: "Roll KubeVirt instance type changes out to running VMs, live where KubeVirt can",
		Long: `kvlive watches KubeVirt instance types and preferences, plans what each change
means for every VM that uses it (live hotplug, restart, next boot), moves each
VM's pin, and records a traced outcome per VM, over NATS JetStream.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if filepath.Base(os.Args[0]) == pluginName {
		// Help and usage read "kubectl kvlive …", as kubectl plugins do.
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kvlive"}
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	g.profile.bind(root.PersistentFlags())
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := g.validate(); err != nil {
			return err
		}
		return g.profile.start()
	}
	root.AddCommand(newRunCmd(g), newSwitchCmd(g), newPlanCmd(g), newDriftCmd(), newDemoCmd(g))
	root.AddCommand(newEventsCmd(g), newOutcomesCmd(g), newTraceCmd(g), newReplayCmd(g), newDLQCmd(g), newRolloutCmd(g), newRolloutsCmd(g), newRevisionsCmd(), newRestartCmd(g), newScopeCmd(g), newDashboardCmd(g))
	root.AddCommand(newVersionCmd())
	strictGroups(root)
	return root
}

// strictGroups makes every command that only groups subcommands (rollout,
// dlq) reject an unknown subcommand with an error, where cobra would print
// the group's help and exit 0; without arguments it still shows the help.
func strictGroups(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		strictGroups(c)
	}
	if cmd.HasParent() && cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: unknown command %q for %q", errUsage, args[0], c.CommandPath())
			}
			return nil
		}
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
}

// invokedAs is how the user ran kvlive, for commands kvlive prints: the
// path it was started by, "kubectl kvlive" as a kubectl plugin, and
// "go run ./cmd/kvlive" from go run's build cache.
func invokedAs() string {
	arg0 := os.Args[0]
	switch {
	case filepath.Base(arg0) == pluginName:
		return "kubectl kvlive"
	case strings.Contains(arg0, string(filepath.Separator)+"go-build"):
		return "go run ./cmd/kvlive"
	}
	return arg0
}

// pluginName is the name kubectl finds kvlive by as a plugin
// (`kubectl kvlive …`).
const pluginName = "kubectl-kvlive"

// errUsage marks a command-line mistake.
var errUsage = errors.New("usage")
