package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/planner/offline"
)

// TestConfirmTakesOnlyYes: y or yes, in any case, goes ahead; anything
// else, an empty line or the end of the input declines.
func TestConfirmTakesOnlyYes(t *testing.T) {
	for answer, want := range map[string]bool{
		"y\n": true, "YES\n": true, " yes \n": true, "y": true,
		"n\n": false, "\n": false, "": false, "yep\n": false, "no\n": false,
	} {
		var asked bytes.Buffer
		got, err := confirm(strings.NewReader(answer), &asked, "Switch these 3 VMs?")
		if err != nil || got != want {
			t.Errorf("answer %q: %v, %v; want %v", answer, got, err, want)
		}
		if asked.String() != "Switch these 3 VMs? [y/N] " {
			t.Errorf("asked %q", asked.String())
		}
	}
}

// TestSwitchChecksItsFlagsBeforeTheCluster: mistakes in the flags are
// usage errors before any cluster or bus is reached.
func TestSwitchChecksItsFlagsBeforeTheCluster(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"switch", "--from", "clusterinstancetype/a"}, `required flag(s) "to" not set`},
		{[]string{"switch", "--from", "clusterinstancetype/a", "--to", "clusterinstancetype/b", "--wait", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"switch", "--from", "clusterinstancetype/a", "--to", "clusterinstancetype/b", "-n", "x", "-A"}, "none of the others can be"},
		{[]string{"switch", "--from", "thing/a", "--to", "clusterinstancetype/b", "--server", "https://127.0.0.1:1"}, `unknown kind "thing"`},
		{[]string{"switch", "--from", "clusterinstancetype/a", "--to", "instancetype/dev/b", "-A", "--server", "https://127.0.0.1:1"},
			"instancetype/dev/b serves only the VMs of namespace dev, and the switch is in every namespace: switch with -n dev"},
		{[]string{"plan", "--from", "clusterinstancetype/a", "--to", "instancetype/dev/b", "-n", "prod", "--server", "https://127.0.0.1:1"},
			"and the switch is in namespace prod"},
		{[]string{"plan", "--from", "clusterinstancetype/a", "--to", "clusterinstancetype/b", "-l", "a=(", "--server", "https://127.0.0.1:1"}, "-l"},
	} {
		out, err := kvlive(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("kvlive %s: %v, want %q\n%s", strings.Join(tt.args, " "), err, tt.want, out)
		}
	}
}

// TestSwitchPreviewIsBriefOnAScreen: on a terminal the preview is the
// counts, the changes and the first VMs before the question; -o wide (or a
// file, where there is no screen) lists every VM.
func TestSwitchPreviewIsBriefOnAScreen(t *testing.T) {
	var plans []events.Plan
	for i := range 30 {
		plans = append(plans, events.Plan{VM: events.VMRef{Namespace: "ns", Name: fmt.Sprintf("vm-%02d", i)}, Action: events.ResultLive,
			Changes: []events.Change{{Field: "cpu.sockets", From: "2", To: "4", Class: "live"}}})
	}
	req := offline.Request{From: &events.Ref{Kind: events.KindClusterInstancetype, Name: "a"}, Object: events.Ref{Kind: events.KindClusterInstancetype, Name: "b"}}
	for _, tt := range []struct {
		rows   int
		output printer.Format
		last   string
		more   bool
	}{{3, printer.FormatTable, "vm-02", true}, {3, printer.FormatWide, "vm-29", false}, {0, printer.FormatTable, "vm-29", false}} {
		var out bytes.Buffer
		o := &switchOptions{yes: true, output: tt.output, screenRows: tt.rows}
		o.say = &out
		o.out = &out
		if err := o.show(req, plans, nil); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tt.last) || strings.Contains(out.String(), "… and 27 more VMs") != tt.more {
			t.Errorf("%d rows, %s: want through %s, more %v:\n%s", tt.rows, tt.output, tt.last, tt.more, out.String())
		}
	}
}
