package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"kvlive/internal/printer"
	"kvlive/readmodel/inspect"
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
func (s *storeFlags) withDLQ(ctx context.Context, log *slog.Logger, fn func(context.Context, inspect.Store) error) error {
	return s.with(ctx, log, func(ctx context.Context, js jetstream.JetStream) error {
		return fn(ctx, inspect.Store{JetStream: js})
	})
}

// dlqListOptions are kvlive dlq list's flags.
type dlqListOptions struct {
	storeOptions
	output printer.Format
}

func dlqList(g *globals) *cobra.Command {
	o := &dlqListOptions{storeOptions: newStoreOptions(g)}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead letters, oldest first",
		Args:  cobra.NoArgs,
		RunE:  runE(o),
	}
	o.store.bind(cmd)
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	return cmd
}

func (o *dlqListOptions) Complete(cmd *cobra.Command, _ []string) error {
	o.complete(cmd)
	return nil
}

func (o *dlqListOptions) Validate() error { return nil }

// Run lists every dead letter.
func (o *dlqListOptions) Run(ctx context.Context) error {
	return o.store.withDLQ(ctx, o.log, func(ctx context.Context, s inspect.Store) error {
		letters, err := s.List(ctx)
		if err != nil {
			return err
		}
		return inspect.WriteLetters(o.out, letters, o.output, printer.Width(o.out))
	})
}

// dlqShowOptions are kvlive dlq show's flags and argument.
type dlqShowOptions struct {
	storeOptions
	output printer.Format
	seq    uint64
}

func dlqShow(g *globals) *cobra.Command {
	o := &dlqShowOptions{storeOptions: newStoreOptions(g)}
	cmd := &cobra.Command{
		Use:   "show SEQ",
		Short: "Show one dead letter: reason, origin, headers and body",
		Args:  cobra.ExactArgs(1),
		RunE:  runE(o),
	}
	o.store.bind(cmd)
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	return cmd
}

// Complete reads the sequence.
func (o *dlqShowOptions) Complete(cmd *cobra.Command, args []string) (err error) {
	o.complete(cmd)
	o.seq, err = parseSeq(args[0])
	return err
}

func (o *dlqShowOptions) Validate() error { return nil }

// Run shows the dead letter.
func (o *dlqShowOptions) Run(ctx context.Context) error {
	return o.store.withDLQ(ctx, o.log, func(ctx context.Context, s inspect.Store) error {
		l, err := s.Show(ctx, o.seq)
		if err != nil {
			return err
		}
		return inspect.WriteLetter(o.out, l, o.output)
	})
}

// dlqSelectOptions are the flags and arguments of retry and purge: the
// dead letters' sequences, or --all.
type dlqSelectOptions struct {
	storeOptions
	all  bool
	args []string
}

func (o *dlqSelectOptions) Complete(cmd *cobra.Command, args []string) error {
	o.complete(cmd)
	o.args = args
	return nil
}

// Validate wants sequences or --all, not both, and sequences that are.
func (o *dlqSelectOptions) Validate() error {
	if o.all == (len(o.args) > 0) {
		return fmt.Errorf("%w: name the sequences, or --all", errUsage)
	}
	_, err := parseSeqs(o.args)
	return err
}

// seqs are the sequences named, or with --all every dead letter's.
func (o *dlqSelectOptions) seqs(ctx context.Context, s inspect.Store) ([]uint64, error) {
	if !o.all {
		return parseSeqs(o.args)
	}
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

// dlqRetryOptions are kvlive dlq retry's.
type dlqRetryOptions struct{ dlqSelectOptions }

func dlqRetry(g *globals) *cobra.Command {
	o := &dlqRetryOptions{dlqSelectOptions{storeOptions: newStoreOptions(g)}}
	cmd := &cobra.Command{
		Use:   "retry SEQ... | --all",
		Short: "Send dead letters back to the subject they came from",
		RunE:  runE(o),
	}
	o.store.bind(cmd)
	cmd.Flags().BoolVar(&o.all, "all", false, "retry every dead letter")
	return cmd
}

// Run sends each dead letter back where it came from.
func (o *dlqRetryOptions) Run(ctx context.Context) error {
	return o.store.withDLQ(ctx, o.log, func(ctx context.Context, s inspect.Store) error {
		seqs, err := o.seqs(ctx, s)
		if err != nil {
			return err
		}
		for _, seq := range seqs {
			if err := s.Retry(ctx, seq); err != nil {
				return err
			}
			fmt.Fprintf(o.out, "retried %d\n", seq)
		}
		return nil
	})
}

// dlqPurgeOptions are kvlive dlq purge's.
type dlqPurgeOptions struct{ dlqSelectOptions }

func dlqPurge(g *globals) *cobra.Command {
	o := &dlqPurgeOptions{dlqSelectOptions{storeOptions: newStoreOptions(g)}}
	cmd := &cobra.Command{
		Use:   "purge SEQ... | --all",
		Short: "Drop dead letters",
		RunE:  runE(o),
	}
	o.store.bind(cmd)
	cmd.Flags().BoolVar(&o.all, "all", false, "drop every dead letter")
	return cmd
}

// Run drops the dead letters: with --all, the whole stream at once.
func (o *dlqPurgeOptions) Run(ctx context.Context) error {
	return o.store.withDLQ(ctx, o.log, func(ctx context.Context, s inspect.Store) error {
		if o.all {
			n, err := s.PurgeAll(ctx)
			switch {
			case err != nil:
				return err
			case n == 0:
				fmt.Fprintln(o.out, "no dead letters to purge")
			default:
				fmt.Fprintf(o.out, "purged %d dead letters\n", n)
			}
			return nil
		}
		seqs, err := parseSeqs(o.args)
		if err != nil {
			return err
		}
		for _, seq := range seqs {
			if err := s.Purge(ctx, seq); err != nil {
				return err
			}
			fmt.Fprintf(o.out, "purged %d\n", seq)
		}
		return nil
	})
}

// parseSeqs reads stream sequences.
func parseSeqs(args []string) ([]uint64, error) {
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
