package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
)

const usage = `usage: clientgo-candidate --lease NAME [--namespace NS] [--identity ID]
         [--kubeconfig PATH] [--lease-duration 15s] [--renew-deadline 10s]
         [--retry-period 2s]

One client-go leader election candidate on a coordination.k8s.io/v1 Lease.
Prints one JSON object per line on stdout at start and at every change;
logs go to stderr. SIGTERM or SIGINT releases the lease, prints a final
"stopped" line and exits 0.

  --lease NAME            Lease name (required)
  --namespace NS          default: $POD_NAMESPACE, then "default"
  --identity ID           default: $POD_NAME, then the hostname
  --kubeconfig PATH       default: $KUBECONFIG, in-cluster, ~/.kube/config
  --lease-duration D      default 15s (whole seconds, at least 1s)
  --renew-deadline D      default 10s
  --retry-period D        default 2s
`

var errHelp = errors.New("help requested")

type options struct {
	lease         string
	namespace     string
	identity      string
	kubeconfig    string
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
}

// parseArgs reads the command line and the environment and checks the
// timings with the same rules as `leasehold elect` (which are client-go's).
func parseArgs(args []string, getenv func(string) string, hostname func() (string, error)) (options, error) {
	var o options
	fs := flag.NewFlagSet("clientgo-candidate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.lease, "lease", "", "")
	fs.StringVar(&o.namespace, "namespace", "", "")
	fs.StringVar(&o.identity, "identity", "", "")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "")
	fs.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "")
	fs.DurationVar(&o.renewDeadline, "renew-deadline", 10*time.Second, "")
	fs.DurationVar(&o.retryPeriod, "retry-period", 2*time.Second, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, errHelp
		}
		// The flag package names flags with one dash; the usage uses two.
		msg := strings.NewReplacer("flag -", "flag --", "defined: -", "defined: --", "needs an argument: -", "needs an argument: --").Replace(err.Error())
		return o, errors.New(msg)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	if o.lease == "" {
		return o, errors.New("--lease is required")
	}
	if errs := validation.IsDNS1123Subdomain(o.lease); len(errs) > 0 {
		return o, fmt.Errorf("--lease %q is not a valid Lease name: %s", o.lease, strings.Join(errs, "; "))
	}

	if o.namespace == "" {
		o.namespace = getenv("POD_NAMESPACE")
	}
	if o.namespace == "" {
		o.namespace = "default"
	}
	if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		return o, fmt.Errorf("namespace %q is not valid: %s", o.namespace, strings.Join(errs, "; "))
	}

	if o.identity == "" {
		o.identity = getenv("POD_NAME")
	}
	if o.identity == "" {
		h, err := hostname()
		if err != nil {
			return o, fmt.Errorf("no --identity, no POD_NAME, and no hostname: %v", err)
		}
		o.identity = h
	}
	if o.identity == "" {
		return o, errors.New("no --identity, no POD_NAME, and the hostname is empty")
	}

	if err := checkTimings(o.leaseDuration, o.renewDeadline, o.retryPeriod); err != nil {
		return o, err
	}
	return o, nil
}

func checkTimings(lease, renew, retry time.Duration) error {
	switch {
	case lease <= 0 || renew <= 0 || retry <= 0:
		return fmt.Errorf("timings must be positive: --lease-duration %v, --renew-deadline %v, --retry-period %v", lease, renew, retry)
	case lease < time.Second || lease%time.Second != 0:
		return fmt.Errorf("--lease-duration %v must be a whole number of seconds, at least 1s (the Lease stores whole seconds)", lease)
	case lease <= renew:
		return fmt.Errorf("--lease-duration %v must be greater than --renew-deadline %v", lease, renew)
	case renew <= time.Duration(leaderelection.JitterFactor*float64(retry)):
		return fmt.Errorf("--renew-deadline %v must be greater than %v x --retry-period %v", renew, leaderelection.JitterFactor, retry)
	}
	return nil
}
