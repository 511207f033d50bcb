package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

// Node phases beyond the warm-up phases.
const (
	NodeDone = "Done" // the worker finished every path; its pod is deleted
)

// syncNode: start the node's worker when it has none, read its progress, record its end.
// A finished worker's pod (it holds the volume staged on the node) is deleted only on a later
// pass, once the status that says Done was written: deleting it first, then failing to write
// the status, would make the next pass start the node over.
func (r *Reconciler) syncNode(ctx context.Context, w *spokev1.SpokeWarmup, handle string, rate int64, n *spokev1.NodeProgress) error {
	var pod corev1.Pod
	key := types.NamespacedName{Namespace: w.Namespace, Name: WorkerPodName(w.Name, n.Node)}
	err := r.Client.Get(ctx, key, &pod)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	found := err == nil
	if n.Phase == NodeDone || n.Phase == spokev1.PhaseFailed {
		if found {
			return r.deletePod(ctx, &pod)
		}
		return nil
	}
	if !found {
		return r.startWorker(ctx, w, handle, rate, n)
	}
	if pod.DeletionTimestamp != nil {
		return nil // an earlier attempt going away; the next pass starts the new one
	}
	if n.Phase == spokev1.PhasePending { // started by a pass whose status was not written
		n.Phase, n.Attempts = spokev1.PhaseRunning, n.Attempts+1
	}
	r.readProgress(ctx, &pod, n)
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		n.Phase, n.Percent, n.ETASeconds = NodeDone, 100, 0
		r.Recorder.Eventf(w, corev1.EventTypeNormal, "NodeWarm", "node %s: %d bytes in %d files cached (%d from the hub)",
			n.Node, n.BytesTotal, n.FilesTotal, n.BytesFromHub)
	case corev1.PodFailed:
		return r.workerFailed(ctx, w, &pod, n)
	}
	return nil
}

func (r *Reconciler) startWorker(ctx context.Context, w *spokev1.SpokeWarmup, handle string, rate int64, n *spokev1.NodeProgress) error {
	pod := WorkerPod(w, n.Node, handle, rate, r.Worker)
	err := r.Client.Create(ctx, pod)
	if apierrors.IsAlreadyExists(err) {
		// The pod cache had not seen it yet: it is the current attempt, already counted
		// unless the status that counted it was lost.
		if n.Phase == spokev1.PhasePending {
			n.Phase, n.Attempts = spokev1.PhaseRunning, n.Attempts+1
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating worker pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	n.Attempts++
	n.Phase = spokev1.PhaseRunning
	log.FromContext(ctx).Info("worker started", "node", n.Node, "pod", pod.Name, "attempt", n.Attempts)
	return nil
}

// readProgress copies the worker's last progress line into n; a line that is not progress
// (an error of spokectl's) becomes the node's message.
func (r *Reconciler) readProgress(ctx context.Context, pod *corev1.Pod, n *spokev1.NodeProgress) {
	if pod.Status.Phase == corev1.PodPending {
		return
	}
	last, err := r.Logs(ctx, pod.Namespace, pod.Name)
	if err != nil || last == "" {
		return
	}
	line, err := ParseLine(last)
	if err != nil {
		n.Message = last
		return
	}
	line.Apply(n)
}

// workerFailed: another attempt (after an agent restart the workers fail and the next one
// finds what is already cached), up to MaxAttempts.
func (r *Reconciler) workerFailed(ctx context.Context, w *spokev1.SpokeWarmup, pod *corev1.Pod, n *spokev1.NodeProgress) error {
	why := n.Message
	if why == "" {
		why = "worker pod failed"
	}
	if n.Attempts >= MaxAttempts {
		n.Phase = spokev1.PhaseFailed
		n.Message = fmt.Sprintf("%s (after %d attempts)", why, n.Attempts)
		r.Recorder.Eventf(w, corev1.EventTypeWarning, "NodeFailed", "node %s: %s", n.Node, n.Message)
	} else {
		r.Recorder.Eventf(w, corev1.EventTypeWarning, "NodeRetry", "node %s, attempt %d: %s", n.Node, n.Attempts, why)
	}
	return r.deletePod(ctx, pod)
}

func (r *Reconciler) deletePod(ctx context.Context, pod *corev1.Pod) error {
	return client.IgnoreNotFound(r.Client.Delete(ctx, pod, client.PropagationPolicy("Background")))
}

// deleteWorkers removes every worker pod of the warm-up.
func (r *Reconciler) deleteWorkers(ctx context.Context, w *spokev1.SpokeWarmup) error {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(w.Namespace),
		client.MatchingLabels{WarmupLabel: w.Name, RoleLabel: RoleWorker}); err != nil {
		return err
	}
	for i := range pods.Items {
		if err := r.deletePod(ctx, &pods.Items[i]); err != nil {
			return err
		}
	}
	return nil
}
