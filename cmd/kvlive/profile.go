package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"

	"github.com/spf13/pflag"
)

// profileNames are the profiles --profile takes, as kubectl's does.
var profileNames = []string{"none", "cpu", "heap", "goroutine", "threadcreate", "block", "mutex"}

// profiling is kubectl's --profile and --profile-output: a pprof profile of
// one command, written when it ends, to see where a slow command's time
// goes (kvlive run serves its own with --profiling).
type profiling struct {
	name, output string
	finish       func() error
}

func (p *profiling) bind(fs *pflag.FlagSet) {
	fs.StringVar(&p.name, "profile", "none", "profile of the command to write when it ends: none, cpu, heap, goroutine, threadcreate, block or mutex")
	fs.StringVar(&p.output, "profile-output", "profile.pprof", "file --profile writes")
}

// start begins the profile --profile names.
func (p *profiling) start() error {
	if !slices.Contains(profileNames, p.name) {
		return fmt.Errorf("%w: --profile %q: want one of %v", errUsage, p.name, profileNames)
	}
	if p.name == "none" {
		return nil
	}
	f, err := os.Create(p.output)
	if err != nil {
		return fmt.Errorf("--profile-output: %w", err)
	}
	switch p.name {
	case "cpu":
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("--profile cpu: %w", err)
		}
		p.finish = func() error {
			pprof.StopCPUProfile()
			return f.Close()
		}
		return nil
	case "block":
		runtime.SetBlockProfileRate(1)
	case "mutex":
		runtime.SetMutexProfileFraction(1)
	}
	p.finish = func() error {
		err := pprof.Lookup(p.name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return nil
}

// stop writes the profile, if one was started.
func (p *profiling) stop() error {
	if p.finish == nil {
		return nil
	}
	finish := p.finish
	p.finish = nil
	if err := finish(); err != nil {
		return fmt.Errorf("--profile %s: write %s: %w", p.name, p.output, err)
	}
	return nil
}
