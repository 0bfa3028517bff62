// Command clientgo-candidate is one client-go leader election candidate on a
// coordination.k8s.io/v1 Lease. It speaks the same command line and the same
// JSON lines on stdout as `leasehold elect`, so that leasehold and client-go
// candidates can share a Lease in interop tests and benchmarks.
//
// Unlike a plain leaderelection.RunOrDie, it stays a candidate after losing
// the lease: the elector is run again until the process is told to stop.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseArgs(args, os.Getenv, os.Hostname)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "clientgo-candidate: %v\n\n%s", err, usage)
		return 2
	}
	defer klog.Flush()

	cfg, err := loadConfig(opts.kubeconfig, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "clientgo-candidate: cannot load a client configuration: %v\n", err)
		return 1
	}
	// One hung request must never outlive the renew deadline: the same
	// per-call timeout client-go's NewFromKubeconfig uses.
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = max(time.Second, opts.renewDeadline/2)
	cfg = rest.AddUserAgent(cfg, "clientgo-candidate")
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "clientgo-candidate: cannot build a client: %v\n", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		// After the first signal, a second one gets the default behaviour.
		<-ctx.Done()
		stop()
	}()

	rep := newReporter(stdout, opts.identity, time.Now)
	rep.start()
	if err := campaign(ctx, client, opts, rep); err != nil {
		fmt.Fprintf(stderr, "clientgo-candidate: %v\n", err)
		return 1
	}
	rep.stopped()
	return 0
}

// campaign runs client-go's elector again and again until ctx is cancelled.
// Each Run returns when this candidate loses the lease (or on cancellation,
// after releasing it because of ReleaseOnCancel).
func campaign(ctx context.Context, client kubernetes.Interface, opts options, rep *reporter) error {
	for gen := 1; ctx.Err() == nil; gen++ {
		lock := &recordingLock{LeaseLock: &resourcelock.LeaseLock{
			LeaseMeta: metav1.ObjectMeta{Namespace: opts.namespace, Name: opts.lease},
			Client:    client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{
				Identity: opts.identity,
			},
		}}
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   opts.leaseDuration,
			RenewDeadline:   opts.renewDeadline,
			RetryPeriod:     opts.retryPeriod,
			ReleaseOnCancel: true,
			Name:            opts.lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leaderCtx context.Context) {
					rep.startedLeading(leaderCtx, gen, lock.term())
				},
				OnStoppedLeading: func() {
					rep.stoppedLeading(gen, ctx.Err() != nil)
				},
				OnNewLeader: func(identity string) {
					rep.newLeader(gen, identity)
				},
			},
		})
		if err != nil {
			return fmt.Errorf("invalid leader election configuration: %w", err)
		}
		elector.Run(ctx)
		if ctx.Err() == nil {
			klog.InfoS("Lost the lease, standing for election again", "lease", lock.Describe(), "identity", opts.identity)
		}
	}
	return nil
}

// loadConfig finds the client configuration: --kubeconfig, then KUBECONFIG,
// then the in-cluster service account, then ~/.kube/config.
func loadConfig(path string, getenv func(string) string) (*rest.Config, error) {
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	if list := getenv("KUBECONFIG"); list != "" {
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(list)}
		return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, err
	}
	if home, herr := os.UserHomeDir(); herr == nil {
		def := filepath.Join(home, ".kube", "config")
		if _, serr := os.Stat(def); serr == nil {
			return clientcmd.BuildConfigFromFlags("", def)
		}
	}
	return nil, errors.New("no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a pod")
}
