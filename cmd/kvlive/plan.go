package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/printer"
	"kvlive/planner/offline"
)

type planOptions struct {
	kube          *kube.Flags
	stdin         io.Reader
	object        string
	from, to      string
	allNamespaces bool
	selector      string
	output        printer.Format
	offline       bool
	file          string
}

func newPlanCmd() *cobra.Command {
	o := &planOptions{kube: kube.NewFlags()}
	cmd := &cobra.Command{
		Use:   "plan [KIND/NAME | --instancetype KIND/[NS/]NAME | --switch FROM --to TO]",
		Short: "Predict, per VM and per field, what a change would do, without writing anything",
		Long: `plan shows what moving every VM that references an instance type or preference
to its current generation (or switching VMs from one to another) would do, per
VM: live, restart, next-boot, none or skip, with every changed field and the
reason. It reads the cluster of the current kubeconfig, or with --offline a
multi-document YAML file of VMs, VMIs, instance types, preferences,
ControllerRevisions and the KubeVirt CR, whose objects are taken as the new
generation. Nothing is written.`,
		Example: `  kvlive plan clusterinstancetype/u1.large -A
  kvlive plan --switch clusterinstancetype/u1.small --to clusterinstancetype/u1.large -n shop -l tier=web
  kvlive plan --offline -f fleet.yaml --instancetype clusterinstancetype/u1.large -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.stdin = cmd.InOrStdin()
			if len(args) == 1 {
				if o.object != "" {
					return fmt.Errorf("%w: give the object as an argument or --instancetype, not both", errUsage)
				}
				o.object = args[0]
			}
			return o.run(cmd)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.object, "instancetype", "", "KIND/[NS/]NAME of the instance type or preference to evaluate")
	f.StringVar(&o.from, "switch", "", "KIND/[NS/]NAME the VMs reference now (with --to)")
	f.StringVar(&o.to, "to", "", "KIND/[NS/]NAME the VMs would switch to (with --switch)")
	o.kube.AddFlags(f, "only VMs in this namespace (default: the context's namespace; all namespaces with --offline)")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "VMs in all namespaces")
	f.StringVarP(&o.selector, "selector", "l", "", "only VMs matching this label selector")
	printer.AddFlag(cmd, &o.output, printer.Formats...)
	f.BoolVar(&o.offline, "offline", false, "read the cluster from -f instead of the kubeconfig")
	f.StringVarP(&o.file, "filename", "f", "", "multi-document YAML file for --offline; - reads standard input")
	return cmd
}

func (o *planOptions) run(cmd *cobra.Command) error {
	if (o.object == "") == (o.from == "") || (o.from != "") != (o.to != "") {
		return fmt.Errorf("%w: name one object to evaluate (KIND/NAME or --instancetype), or --switch FROM --to TO", errUsage)
	}
	if o.offline != (o.file != "") {
		return fmt.Errorf("%w: --offline and -f go together", errUsage)
	}
	selector, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("%w: -l %q: %w", errUsage, o.selector, err)
	}
	ctx := cmd.Context()
	clients, namespace, err := o.clients(ctx)
	if err != nil {
		return err
	}
	req, err := o.request(namespace, selector)
	if err != nil {
		return err
	}
	f, stop, err := kube.StartCache(ctx, clients, req.Namespace, kube.DefaultSyncTimeout)
	if err != nil {
		return err
	}
	defer stop()
	plans, err := offline.Plan(f, req)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	return offline.NewReport(plans).Print(out, o.output, printer.Width(out))
}

// clients reads the cluster (or the offline file) and resolves the
// namespace the user means: kubectl's rules online, all of the file offline.
func (o *planOptions) clients(ctx context.Context) (kube.Clients, string, error) {
	if o.offline {
		in := o.stdin
		if o.file != "-" {
			file, err := os.Open(o.file)
			if err != nil {
				return kube.Clients{}, "", err
			}
			defer func() { _ = file.Close() }()
			in = file
		}
		clients, err := offline.Load(ctx, in)
		if err != nil {
			return kube.Clients{}, "", fmt.Errorf("%s: %w", o.file, err)
		}
		return clients, o.kube.ExplicitNamespace(), nil
	}
	cfg, namespace, err := o.kube.Load()
	if err != nil {
		return kube.Clients{}, "", err
	}
	clients, err := kube.NewClients(cfg)
	return clients, namespace, err
}

func (o *planOptions) request(namespace string, selector labels.Selector) (offline.Request, error) {
	req := offline.Request{Namespace: namespace, Selector: selector}
	if o.allNamespaces {
		req.Namespace = ""
	}
	object := o.object
	if o.from != "" {
		object = o.to
		from, err := events.ParseRef(o.from, namespace)
		if err != nil {
			return req, fmt.Errorf("%w: --switch: %w", errUsage, err)
		}
		req.From = &from
	}
	ref, err := events.ParseRef(object, namespace)
	if err != nil {
		return req, fmt.Errorf("%w: %w", errUsage, err)
	}
	req.Object = ref
	return req, nil
}
