package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/kube"
	"kvlive/planner/offline"
)

// fleetFlags choose the VMs plan and switch act on. Both commands bind the
// same flags with the same defaults (kubectl's: the context's namespace
// unless -n or -A), so a preview covers exactly the VMs a switch moves.
type fleetFlags struct {
	kube           *kubeFlags
	from, to       string
	allNamespaces  bool
	selector       string
	forceConflicts bool
}

func newFleetFlags() *fleetFlags { return &fleetFlags{kube: newKubeFlags()} }

// bind adds the connection flags, -A, -l, and --from/--to with their help.
func (s *fleetFlags) bind(cmd *cobra.Command, fromUsage, toUsage string) {
	s.bindScope(cmd)
	f := cmd.Flags()
	f.StringVar(&s.from, "from", "", fromUsage)
	f.StringVar(&s.to, "to", "", toUsage)
	for _, name := range []string{"from", "to"} {
		_ = cmd.RegisterFlagCompletionFunc(name, completeKinds)
	}
	f.BoolVar(&s.forceConflicts, "force-conflicts", false, "switch VMs whose reference another manager owns by server-side apply (a GitOps tool), taking it over, as kubectl apply --force-conflicts does")
}

// bindScope adds the connection flags, -A and -l: which VMs a command
// reads.
func (s *fleetFlags) bindScope(cmd *cobra.Command) {
	f := cmd.Flags()
	s.kube.addFlags(f, "only VMs in this namespace (default: the kubeconfig context's namespace)")
	f.BoolVarP(&s.allNamespaces, "all-namespaces", "A", false, "VMs in all namespaces")
	f.StringVarP(&s.selector, "selector", "l", "", "only VMs matching this label selector")
	cmd.MarkFlagsMutuallyExclusive("namespace", "all-namespaces")
}

// scope resolves -A, -n and -l: the namespace ("" for all; the
// kubeconfig's by default) and the selector of the VMs.
func (s *fleetFlags) scope(namespace string) (string, labels.Selector, error) {
	selector, err := labels.Parse(s.selector)
	if err != nil {
		return "", nil, fmt.Errorf("%w: -l %q: %w", errUsage, s.selector, err)
	}
	if s.allNamespaces {
		namespace = ""
	}
	return namespace, selector, nil
}

// request resolves the flags into what offline.Plan (and the planner, for
// a switch) selects: object is the instance type or preference the VMs go
// to (--to for a switch); namespace is the one the user means by default.
func (s *fleetFlags) request(object, namespace string) (offline.Request, error) {
	scoped, selector, err := s.scope(namespace)
	if err != nil {
		return offline.Request{}, err
	}
	req := offline.Request{Namespace: scoped, Selector: selector, ForceConflicts: s.forceConflicts}
	if s.forceConflicts && s.from == "" {
		return req, fmt.Errorf("%w: --force-conflicts is for a switch (--from and --to)", errUsage)
	}
	if s.from != "" {
		from, err := events.ParseRef(s.from, namespace)
		if err != nil {
			return req, fmt.Errorf("%w: --from: %w", errUsage, err)
		}
		req.From, object = &from, s.to
	}
	if req.Object, err = events.ParseRef(object, namespace); err != nil {
		flag := ""
		if s.from != "" {
			flag = "--to: "
		}
		return req, fmt.Errorf("%w: %s%w", errUsage, flag, err)
	}
	if req.From != nil {
		scoped := events.SwitchRequest{From: *req.From, To: req.Object, Namespace: req.Namespace}
		if err := scoped.CheckScope(); err != nil {
			return req, fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	return req, nil
}

// planCluster plans req against the cluster's current state
// (startPlanCache).
func planCluster(ctx context.Context, clients kube.Clients, req offline.Request) ([]events.Plan, error) {
	f, stop, err := startPlanCache(ctx, clients, req)
	if err != nil {
		return nil, err
	}
	defer stop()
	return offline.Plan(f, req)
}

// startPlanCache reads the cluster's state for planning req into a cache
// that is synced (or refused within the sync timeout); of the
// ControllerRevisions, it reads only those req's VMs are pinned to
// (offline.Involved). stop ends it.
func startPlanCache(ctx context.Context, clients kube.Clients, req offline.Request) (_ *kube.Cache, stop func(), _ error) {
	return kube.StartCacheFor(ctx, clients, req.Namespace, kube.DefaultSyncTimeout, func(f *kube.Cache) instancetype.Involvement { return offline.Involved(f, req) })
}

// completeKinds offers the four kinds a reference starts with.
func completeKinds(_ *cobra.Command, _ []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var kinds []cobra.Completion
	for _, k := range []string{"clusterinstancetype/", "instancetype/", "clusterpreference/", "preference/"} {
		if strings.HasPrefix(k, typed) {
			kinds = append(kinds, k)
		}
	}
	return kinds, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}

// errNotConfirmed is a change the user declined at the prompt.
var errNotConfirmed = errors.New("not confirmed: nothing was requested")

// confirm asks question on w and reads the answer from in: y or yes (any
// case) goes ahead; anything else, or the end of the input, does not.
func confirm(in io.Reader, w io.Writer, question string) (bool, error) {
	fmt.Fprintf(w, "%s [y/N] ", question)
	answer, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
