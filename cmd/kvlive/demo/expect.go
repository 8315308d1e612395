package demo

import (
	"kvlive/events"
)

// expected is the result the fleet's shape dictates for a VM the step
// reaches, given the demo's changes: both grow CPU and memory within the
// VMI's hotplug limits, so a running VM goes live unless it cannot migrate
// (memory hotplug needs migration), and a stopped VM waits for its boot.
func expected(s vmShape) events.Result {
	switch {
	case !s.running:
		return events.ResultNextBoot
	case !s.migratable:
		return events.ResultRestart
	}
	return events.ResultLive
}

func editSelects(s vmShape) bool {
	return s.instancetype == events.Ref{Kind: events.KindClusterInstancetype, Name: EditName}
}

func switchSelects(s vmShape) bool {
	return s.instancetype == events.Ref{Kind: events.KindClusterInstancetype, Name: SwitchFrom} && s.tier == "web"
}
