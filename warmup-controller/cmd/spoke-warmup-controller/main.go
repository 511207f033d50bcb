// spoke-warmup-controller reconciles SpokeWarmup objects and serves the pod-gating webhook.
// It runs in the Spoke controller Deployment; see docs/warmup.md.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
	"github.com/spoke-csi/spoke/warmup-controller/internal/controller"
	gate "github.com/spoke-csi/spoke/warmup-controller/internal/webhook"
)

type options struct {
	image, socketDir, driverName, leaseNamespace, certDir, probeAddr, metricsAddr string
	webhookPort                                                                   int
	leaderElect                                                                   bool
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.image, "worker-image", "", "image of the worker pods (has bash and spokectl)")
	flag.StringVar(&o.socketDir, "agent-socket-dir", "/var/lib/spoke/run", "host directory of the agent's socket")
	flag.StringVar(&o.driverName, "driver-name", "spoke.csi.dev", "CSI driver whose StorageClasses a warm-up may name")
	flag.StringVar(&o.leaseNamespace, "leader-election-namespace", "", "namespace of the leader Lease")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "run reconcilers only in the Lease holder")
	flag.StringVar(&o.certDir, "webhook-cert-dir", "/etc/spoke/webhook-tls", "tls.crt and tls.key of the webhook")
	flag.IntVar(&o.webhookPort, "webhook-port", 9443, "webhook HTTPS port (0: no webhook)")
	flag.StringVar(&o.probeAddr, "health-address", ":9811", "/healthz and /readyz")
	flag.StringVar(&o.metricsAddr, "metrics-address", "0", "controller metrics (0: off)")
	flag.Parse()
	return o
}

func main() {
	o := parseFlags()
	ctrl.SetLogger(zap.New())
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "spoke-warmup-controller:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.image == "" {
		return fmt.Errorf("--worker-image is required")
	}
	mgr, err := newManager(o)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	r := &controller.Reconciler{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Logs: lastLogLine(cs),
		Recorder:   mgr.GetEventRecorderFor("spoke-warmup-controller"),
		Worker:     controller.WorkerOptions{Image: o.image, AgentSocketDir: o.socketDir},
		DriverName: o.driverName,
		Now:        time.Now,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if o.webhookPort > 0 {
		mgr.GetWebhookServer().Register(gate.Path, &webhook.Admission{
			Handler: &gate.GatePods{Decoder: admission.NewDecoder(mgr.GetScheme())}})
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return err
		}
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// newManager: leader election on a Lease; the pod cache holds only workers and gated pods.
func newManager(o options) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := spokev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	role, err := labels.NewRequirement(controller.RoleLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	var hooks webhook.Server
	if o.webhookPort > 0 {
		hooks = webhook.NewServer(webhook.Options{Port: o.webhookPort, CertDir: o.certDir})
	}
	return ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "spoke-warmup-controller",
		LeaderElectionNamespace: o.leaseNamespace,
		// A new pod (rollout, restart) takes over at once instead of waiting out the lease;
		// safe because the process exits right after the manager stops.
		LeaderElectionReleaseOnCancel: true,
		HealthProbeBindAddress:        o.probeAddr,
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddr},
		WebhookServer:                 hooks,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.NewSelector().Add(*role)},
		}},
	})
}

// lastLogLine reads the last line of a pod's log (pods/log get).
func lastLogLine(cs kubernetes.Interface) controller.LogReader {
	tail := int64(1)
	return func(ctx context.Context, ns, pod string) (string, error) {
		raw, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
		if err != nil {
			return "", err
		}
		return string(bytes.TrimSpace(raw)), nil
	}
}
