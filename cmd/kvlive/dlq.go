package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"kvlive/internal/inspect"
	"kvlive/internal/printer"
)

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect, retry and purge dead-lettered messages",
		Long: `Messages a stage cannot decode, or gives up on after the maximum deliveries,
land in the KVLIVE_DLQ stream with the reason, the subject they came from and
their original headers. retry sends one back to where it came from; purge
drops it.`,
	}
	cmd.AddCommand(dlqList(g), dlqShow(g), dlqRetry(g), dlqPurge(g))
	return cmd
}

// withDLQ opens the store the flags name and runs fn on its dead letters.
func withDLQ(cmd *cobra.Command, g *globals, store *storeFlags, fn func(context.Context, inspect.Store) error) error {
	return withJetStream(cmd, g, store, func(ctx context.Context, js jetstream.JetStream) error {
		return fn(ctx, inspect.Store{JetStream: js})
	})
}

func dlqList(g *globals) *cobra.Command {
	var store storeFlags
	var output printer.Format
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead letters, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withDLQ(cmd, g, &store, func(ctx context.Context, s inspect.Store) error {
				letters, err := s.List(ctx)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if !output.Human() {
					return printer.WriteData(out, output, printer.NonNil(letters))
				}
				t := printer.NewTable(
					printer.Column{Name: "SEQ"},
					printer.Column{Name: "TIME"},
					printer.Column{Name: "STAGE"},
					printer.Column{Name: "SUBJECT", Fit: true, Min: 16},
					printer.Column{Name: "REASON", Fit: true},
				)
				for _, l := range letters {
					t.Append(strconv.FormatUint(l.Seq, 10), l.Time.Format(time.RFC3339), l.Stage, l.Subject, l.Reason)
				}
				if err := t.Write(out, output, printer.Width(out)); err != nil {
					return err
				}
				fmt.Fprintf(out, "\n%d dead letters\n", len(letters))
				return nil
			})
		},
	}
	store.bind(cmd)
	printer.AddFlag(cmd, &output, printer.Formats...)
	return cmd
}

func dlqShow(g *globals) *cobra.Command {
	var store storeFlags
	var output printer.Format
	cmd := &cobra.Command{
		Use:   "show SEQ",
		Short: "Show one dead letter: reason, origin, headers and body",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := parseSeq(args[0])
			if err != nil {
				return err
			}
			return withDLQ(cmd, g, &store, func(ctx context.Context, s inspect.Store) error {
				l, err := s.Show(ctx, seq)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if !output.Human() {
					return printer.WriteData(out, output, l)
				}
				fmt.Fprintf(out, "seq:     %d\ntime:    %s\nstage:   %s\nsubject: %s\nreason:  %s\nheaders:\n", l.Seq, l.Time, l.Stage, l.Subject, l.Reason)
				for _, k := range slices.Sorted(maps.Keys(l.Headers)) {
					for _, v := range l.Headers[k] {
						fmt.Fprintf(out, "  %s: %s\n", k, v)
					}
				}
				fmt.Fprintf(out, "body:\n%s\n", l.Data)
				return nil
			})
		},
	}
	store.bind(cmd)
	printer.AddFlag(cmd, &output, printer.Formats...)
	return cmd
}

func dlqRetry(g *globals) *cobra.Command {
	var store storeFlags
	var all bool
	cmd := &cobra.Command{
		Use:   "retry SEQ... | --all",
		Short: "Send dead letters back to the subject they came from",
		RunE: func(cmd *cobra.Command, args []string) error {
			return withDLQ(cmd, g, &store, func(ctx context.Context, s inspect.Store) error {
				seqs, err := selectSeqs(ctx, s, args, all)
				if err != nil {
					return err
				}
				for _, seq := range seqs {
					if err := s.Retry(ctx, seq); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "retried %d\n", seq)
				}
				return nil
			})
		},
	}
	store.bind(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "retry every dead letter")
	return cmd
}

func dlqPurge(g *globals) *cobra.Command {
	var store storeFlags
	var all bool
	cmd := &cobra.Command{
		Use:   "purge SEQ... | --all",
		Short: "Drop dead letters",
		RunE: func(cmd *cobra.Command, args []string) error {
			return withDLQ(cmd, g, &store, func(ctx context.Context, s inspect.Store) error {
				if all && len(args) == 0 {
					n, err := s.PurgeAll(ctx)
					if err != nil {
						return err
					}
					if n == 0 {
						fmt.Fprintln(cmd.OutOrStdout(), "no dead letters to purge")
						return nil
					}
					fmt.Fprintf(cmd.OutOrStdout(), "purged %d dead letters\n", n)
					return nil
				}
				seqs, err := selectSeqs(ctx, s, args, all)
				if err != nil {
					return err
				}
				for _, seq := range seqs {
					if err := s.Purge(ctx, seq); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "purged %d\n", seq)
				}
				return nil
			})
		},
	}
	store.bind(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "drop every dead letter")
	return cmd
}

func selectSeqs(ctx context.Context, s inspect.Store, args []string, all bool) ([]uint64, error) {
	if all == (len(args) > 0) {
		return nil, fmt.Errorf("%w: name the sequences, or --all", errUsage)
	}
	if all {
		letters, err := s.List(ctx)
		if err != nil {
			return nil, err
		}
		seqs := make([]uint64, 0, len(letters))
		for _, l := range letters {
			seqs = append(seqs, l.Seq)
		}
		return seqs, nil
	}
	seqs := make([]uint64, 0, len(args))
	for _, a := range args {
		seq, err := parseSeq(a)
		if err != nil {
			return nil, err
		}
		seqs = append(seqs, seq)
	}
	return seqs, nil
}

func parseSeq(s string) (uint64, error) {
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("%w: %q is not a stream sequence", errUsage, s)
	}
	return seq, nil
}
