package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"
)

// options are one command's flags and arguments, run in kubectl's three
// steps: Complete fills in what the command line leaves to the
// environment, Validate refuses what cannot work before anything is read,
// and Run does the command's job, through one library call where it can.
type options interface {
	Complete(cmd *cobra.Command, args []string) error
	Validate() error
	Run(ctx context.Context) error
}

// runE is a command's RunE: o's Complete, Validate and Run in turn.
func runE(o options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := o.Complete(cmd, args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
}

// streams are a command's standard input, output and error, taken from
// cobra in Complete (so tests can set them on the root).
type streams struct {
	in          io.Reader
	out, errOut io.Writer
}

func (s *streams) take(cmd *cobra.Command) {
	s.in, s.out, s.errOut = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
}
