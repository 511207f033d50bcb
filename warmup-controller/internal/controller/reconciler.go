// Package controller reconciles SpokeWarmups: one worker pod per chosen node runs
// `spokectl warmup` against that node's agent; the controller reads each worker's last
// progress line, labels the nodes by warmth, and releases the pods gated on the warm-up.
package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

// Finalizer: deleting a warm-up stops its workers and takes its labels off the nodes first.
const Finalizer = "spoke.csi.dev/warmup"

// MaxAttempts of a node's worker pod before the node counts as failed.
const MaxAttempts = 3

// How often progress is read while workers run (a worker prints a line a second).
const pollInterval = time.Second

// LogReader returns the last line a pod printed ("" when none yet).
type LogReader func(ctx context.Context, namespace, pod string) (string, error)

// Reconciler of SpokeWarmup.
type Reconciler struct {
	Client   client.Client // cached: warm-ups, nodes, PVCs, PVs, pods with RoleLabel
	Reader   client.Reader // uncached: pods of podSelector, the warm-up before a new round
	Logs     LogReader
	Recorder record.EventRecorder
	Worker   WorkerOptions
	// DriverName: the CSI driver whose StorageClasses a warm-up may name (spoke.csi.dev).
	DriverName string
	Now        func() time.Time
}

// Reconcile brings one warm-up a step further; it is safe to run again at any point (all
// state is in the status and in the worker pods' names).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var w spokev1.SpokeWarmup
	if err := r.Client.Get(ctx, req.NamespacedName, &w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !w.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, &w)
	}
	if controllerutil.AddFinalizer(&w, Finalizer) {
		return ctrl.Result{}, r.Client.Update(ctx, &w)
	}
	before := w.DeepCopy().Status
	res, err := r.step(ctx, &w)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !statusEqual(&before, &w.Status) {
		if err := r.Client.Status().Update(ctx, &w); err != nil {
			return ctrl.Result{}, err
		}
	}
	return res, nil
}

// step: a new round when the spec changed, the volume's handle, the chosen nodes, each
// node's worker, then the summary, the labels and the gates.
func (r *Reconciler) step(ctx context.Context, w *spokev1.SpokeWarmup) (ctrl.Result, error) {
	if w.Status.ObservedGeneration != w.Generation {
		stale, err := r.staleCache(ctx, w)
		if err != nil || stale {
			return ctrl.Result{RequeueAfter: pollInterval}, err
		}
		if err := r.newRound(ctx, w); err != nil {
			return ctrl.Result{}, err
		}
	}
	rate, msg := RateBytes(w.Spec)
	if msg != "" {
		r.setPending(w, "InvalidSpec", msg)
		return ctrl.Result{}, nil // a spec change is a new generation, and a new reconcile
	}
	if w.Spec.Source.StorageClass != "" {
		// The class's claim is made for the round's first node (classes that bind on first use).
		if ok, err := r.haveNodes(ctx, w); !ok || err != nil {
			return ctrl.Result{RequeueAfter: 10 * time.Second}, err
		}
		if msg, err := r.ensureSourceClaim(ctx, w); err != nil || msg != "" {
			r.setPending(w, "VolumeNotReady", msg)
			return ctrl.Result{RequeueAfter: 5 * time.Second}, err
		}
	}
	handle, msg, err := r.volumeHandle(ctx, w)
	if err != nil || msg != "" {
		r.setPending(w, "VolumeNotReady", msg)
		return ctrl.Result{RequeueAfter: 5 * time.Second}, err
	}
	w.Status.DatasetLabel = DatasetLabelKey(handle)
	if ok, err := r.haveNodes(ctx, w); !ok || err != nil {
		return ctrl.Result{RequeueAfter: 10 * time.Second}, err
	}
	for i := range w.Status.Nodes {
		if err := r.syncNode(ctx, w, handle, rate, &w.Status.Nodes[i]); err != nil {
			return ctrl.Result{}, err
		}
	}
	wasReady := w.Status.Phase == spokev1.PhaseReady
	r.summarize(w)
	if err := r.labelNodes(ctx, w); err != nil {
		return ctrl.Result{}, err
	}
	if w.Status.Phase == spokev1.PhaseReady {
		return r.whenReady(ctx, w, wasReady)
	}
	if w.Status.Phase == spokev1.PhaseFailed {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: pollInterval}, nil
}

// staleCache: the cached warm-up is older than the API server's. A new round deletes the
// workers, so it is decided on the API server's copy: right after a round started, the cache
// may still show the generation unobserved.
func (r *Reconciler) staleCache(ctx context.Context, w *spokev1.SpokeWarmup) (bool, error) {
	var fresh spokev1.SpokeWarmup
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(w), &fresh); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return fresh.ResourceVersion != w.ResourceVersion, nil
}

// newRound forgets the nodes' progress (their workers are deleted): a changed spec, or the
// next Cron time.
func (r *Reconciler) newRound(ctx context.Context, w *spokev1.SpokeWarmup) error {
	if err := r.deleteWorkers(ctx, w); err != nil {
		return err
	}
	w.Status.ObservedGeneration = w.Generation
	w.Status.Round++
	w.Status.Nodes = nil
	r.Recorder.Eventf(w, corev1.EventTypeNormal, "Started", "round %d of the warm-up of %s", w.Status.Round, SourceText(w))
	return nil
}

// volumeHandle of the source PVC's bound PV; msg says why there is none yet.
func (r *Reconciler) volumeHandle(ctx context.Context, w *spokev1.SpokeWarmup) (string, string, error) {
	var pvc corev1.PersistentVolumeClaim
	key := types.NamespacedName{Namespace: w.Namespace, Name: SourcePVCName(w)}
	if err := r.Client.Get(ctx, key, &pvc); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Sprintf("spec.source.pvc: PVC %s not found", key), nil
		}
		return "", "", err
	}
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return "", fmt.Sprintf("PVC %s is not bound yet", key), nil
	}
	var pv corev1.PersistentVolume
	if err := r.Client.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, &pv); err != nil {
		return "", "", err
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.VolumeHandle == "" {
		return "", fmt.Sprintf("spec.source.pvc: PV %s of PVC %s is not a CSI volume", pv.Name, key), nil
	}
	return pv.Spec.CSI.VolumeHandle, "", nil
}

// haveNodes: the round's nodes, chosen now if they are not yet; false (the warm-up left
// Pending) when none matches.
func (r *Reconciler) haveNodes(ctx context.Context, w *spokev1.SpokeWarmup) (bool, error) {
	if len(w.Status.Nodes) == 0 {
		if err := r.chooseNodes(ctx, w); err != nil {
			return false, err
		}
		if len(w.Status.Nodes) == 0 {
			r.setPending(w, "NoNodes", "no usable node matches spec.nodes")
			return false, nil
		}
	}
	return true, nil
}

// chooseNodes fixes the round's nodes in the status, so that a restart keeps them.
func (r *Reconciler) chooseNodes(ctx context.Context, w *spokev1.SpokeWarmup) error {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return err
	}
	var pods corev1.PodList
	if w.Spec.Nodes.PodSelector != nil {
		if err := r.Reader.List(ctx, &pods, client.InNamespace(w.Namespace)); err != nil {
			return err
		}
	}
	names, err := ChooseNodes(w.Spec.Nodes, nodes.Items, pods.Items)
	if err != nil {
		r.Recorder.Event(w, corev1.EventTypeWarning, "InvalidSpec", err.Error())
		return nil
	}
	for _, n := range names {
		w.Status.Nodes = append(w.Status.Nodes, spokev1.NodeProgress{Node: n, Phase: spokev1.PhasePending})
	}
	return nil
}

func (r *Reconciler) setPending(w *spokev1.SpokeWarmup, reason, msg string) {
	if w.Status.Phase != spokev1.PhasePending || readyMessage(w) != msg {
		r.Recorder.Event(w, corev1.EventTypeWarning, reason, msg)
	}
	w.Status.Phase = spokev1.PhasePending
	setReady(w, false, reason, msg, r.Now())
}

// SetupWithManager: warm-ups, and the pods that carry RoleLabel (workers and gated pods),
// mapped to their warm-up by WarmupLabel.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&spokev1.SpokeWarmup{}).
		Watches(&corev1.Pod{}, podToWarmup()).
		Complete(r)
}
