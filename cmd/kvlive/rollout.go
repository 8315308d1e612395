package main

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"kvlive/events"
	"kvlive/internal/inspect"
	"kvlive/internal/printer"
	"kvlive/internal/rollout"
)

func newRolloutCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Pause, resume or abort an event's rollout, or show where it stands",
		Long: `rollout controls one event's rollout while the applier carries it out.

pause holds the event's plans: VMs already being moved finish, every other
plan is parked untouched until resume sends it back. abort is final: VMs not
yet moved get a skip outcome saying the rollout was aborted (replay the event
to run it again). An event can be paused or aborted before it happens, with
--ahead: its id is <kind>/<uid>/<generation>. An id kvlive has no rollout of
is otherwise an error, so a typo never answers "paused". Each change is a
compare-and-set on the event's record, so two operators never overwrite each
other unseen; --force overwrites a record that no longer decodes.

status derives the rollout's phase from its accounting (every planned VM
has an outcome, a dead letter, a held plan or a plan in flight): pending,
running, paused, aborted, complete, or incomplete with how many VMs are
unaccounted for and since when.`,
		Example: `  kvlive rollout pause VirtualMachineClusterInstancetype/2f6c…/5 --reason "checking the first VMs"
  kvlive rollout status VirtualMachineClusterInstancetype/2f6c…/5
  kvlive rollout resume VirtualMachineClusterInstancetype/2f6c…/5
  kvlive rollout abort switch/0b5c… --reason "wrong target"`,
	}
	for _, action := range []events.ControlAction{events.ActionPause, events.ActionResume, events.ActionAbort} {
		cmd.AddCommand(rolloutActionCmd(g, action))
	}
	cmd.AddCommand(rolloutStatusCmd(g))
	return cmd
}

func rolloutActionCmd(g *globals, action events.ControlAction) *cobra.Command {
	var store storeFlags
	var reason string
	var ahead, force bool
	cmd := &cobra.Command{
		Use: string(action) + " EVENT-ID",
		Short: map[events.ControlAction]string{
			events.ActionPause:  "Hold an event's plans: no more VMs move until resume",
			events.ActionResume: "Send a paused event's held plans back to the applier",
			events.ActionAbort:  "Stop an event's rollout for good: VMs not yet moved are skipped",
		}[action],
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withJetStream(cmd, g, &store, func(ctx context.Context, js jetstream.JetStream) error {
				s, err := rollout.Open(ctx, js)
				if err != nil {
					return err
				}
				if !ahead {
					if args[0], err = rollout.ResolveEventID(ctx, js, args[0]); err != nil {
						return err
					}
				}
				if err := checkKnown(ctx, js, s, args[0], action, ahead); err != nil {
					return err
				}
				c, changed, err := s.Apply(ctx, args[0], action, reason, whoAmI(), time.Now(), force)
				if err != nil {
					return fmt.Errorf("%s %s: %w", action, args[0], err)
				}
				if !changed {
					fmt.Fprintf(cmd.OutOrStdout(), "%s is already %s\n", args[0], c.State)
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", args[0], c.State)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the change and in skipped VMs' outcomes")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite the event's control record even when it no longer decodes")
	if action != events.ActionResume {
		cmd.Flags().BoolVar(&ahead, "ahead", false, "the event has not been planned yet: "+string(action)+" it ahead, as soon as it arrives")
	}
	store.bind(cmd)
	cmd.ValidArgsFunction = store.completeEventIDs
	return cmd
}

// checkKnown refuses to steer an event kvlive has no rollout of (neither
// planned nor steered before), unless asked to act ahead of it.
func checkKnown(ctx context.Context, js jetstream.JetStream, s *rollout.Store, eventID string, action events.ControlAction, ahead bool) error {
	_, recorded, err := rollout.Record(ctx, js, eventID)
	if err != nil || recorded || ahead {
		return err
	}
	if _, rev, _ := s.Get(ctx, eventID); rev > 0 {
		return nil
	}
	err = fmt.Errorf("%w %q: no event with that id was planned (kvlive events lists them)", rollout.ErrNoRollout, eventID)
	if action != events.ActionResume {
		err = fmt.Errorf("%w; to %s an event before it is planned, say --ahead", err, action)
	}
	return err
}

func rolloutStatusCmd(g *globals) *cobra.Command {
	var store storeFlags
	var output printer.Format
	cmd := &cobra.Command{
		Use:   "status EVENT-ID",
		Short: "Show an event's rollout: its state, planned VMs, outcomes by result and held plans",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withJetStream(cmd, g, &store, func(ctx context.Context, js jetstream.JetStream) error {
				id, err := rollout.ResolveEventID(ctx, js, args[0])
				if err != nil {
					return err
				}
				a, err := rollout.AccountOf(ctx, js, id)
				if err != nil {
					return err
				}
				return inspect.WriteStatus(cmd.OutOrStdout(), a, output)
			})
		},
	}
	printer.AddFlag(cmd, &output, printer.Formats...)
	store.bind(cmd)
	cmd.ValidArgsFunction = store.completeEventIDs
	return cmd
}

// whoAmI names the operator in control records: user@host.
func whoAmI() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if host, err := os.Hostname(); err == nil {
		return name + "@" + host
	}
	return name
}
