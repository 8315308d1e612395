// Command promrules prints the rule groups of a PrometheusRule manifest as
// a Prometheus rule file, for promtool check rules: deploy/monitoring keeps
// its alerts in one place, the PrometheusRule the Prometheus Operator
// loads.
//
//	go run ./deploy/monitoring/promrules deploy/monitoring/prometheusrule.yaml > rules.yaml
package main

import (
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "promrules:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: promrules PROMETHEUSRULE.yaml")
	}
	raw, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	if rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		return fmt.Errorf("%s: not a PrometheusRule with rule groups", args[0])
	}
	out, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}
