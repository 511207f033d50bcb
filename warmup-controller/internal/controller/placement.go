package controller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

// labelNodes puts the dataset's warmth bucket on each chosen node (only when it changed).
func (r *Reconciler) labelNodes(ctx context.Context, w *spokev1.SpokeWarmup) error {
	for _, n := range w.Status.Nodes {
		want := strconv.Itoa(int(Bucket(n.Percent)))
		if err := r.setNodeLabel(ctx, n.Node, w.Status.DatasetLabel, &want); err != nil {
			return err
		}
	}
	return nil
}

// setNodeLabel sets (value) or removes (nil) one label of a node with a merge patch.
func (r *Reconciler) setNodeLabel(ctx context.Context, name, key string, value *string) error {
	var node corev1.Node
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
		return client.IgnoreNotFound(err)
	}
	cur, has := node.Labels[key]
	if (value == nil && !has) || (value != nil && has && cur == *value) {
		return nil
	}
	patch := client.MergeFrom(node.DeepCopy())
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	if value == nil {
		delete(node.Labels, key)
	} else {
		node.Labels[key] = *value
	}
	return r.Client.Patch(ctx, &node, patch)
}

// whenReady: record the completion (Events on the warm-up and the PVC), release the gated
// pods, and for Cron wait for the next time.
func (r *Reconciler) whenReady(ctx context.Context, w *spokev1.SpokeWarmup, wasReady bool) (ctrl.Result, error) {
	now := r.Now()
	if !wasReady {
		t := metav1.NewTime(now)
		w.Status.LastCompletion = &t
		// Written before any gated pod is released: no pod runs while its warm-up still reads
		// Running (and a lost write releases nobody).
		if err := r.Client.Status().Update(ctx, w); err != nil {
			return ctrl.Result{}, err
		}
		msg := fmt.Sprintf("%s nodes hold at least %d%% of %s", w.Status.NodesReady, ReadyPercent(w), SourceText(w))
		r.Recorder.Event(w, corev1.EventTypeNormal, "Ready", msg)
		var pvc corev1.PersistentVolumeClaim
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: w.Namespace, Name: SourcePVCName(w)}, &pvc); err == nil {
			r.Recorder.Eventf(&pvc, corev1.EventTypeNormal, "WarmupReady", "SpokeWarmup %s: %s", w.Name, msg)
		}
	}
	if err := r.releaseGatedPods(ctx, w); err != nil {
		return ctrl.Result{}, err
	}
	for _, n := range w.Status.Nodes {
		if n.Phase != NodeDone {
			return ctrl.Result{RequeueAfter: pollInterval}, nil // on to 100 %
		}
	}
	return r.nextCron(ctx, w, now)
}

// nextCron starts a new round at the first Cron time after the last completion.
func (r *Reconciler) nextCron(ctx context.Context, w *spokev1.SpokeWarmup, now time.Time) (ctrl.Result, error) {
	if w.Spec.Schedule.Mode != spokev1.ScheduleCron || w.Status.LastCompletion == nil {
		return ctrl.Result{}, nil
	}
	sched, err := cron.ParseStandard(w.Spec.Schedule.Cron)
	if err != nil {
		r.Recorder.Eventf(w, corev1.EventTypeWarning, "InvalidSpec", "spec.schedule.cron: %v", err)
		return ctrl.Result{}, nil
	}
	next := sched.Next(w.Status.LastCompletion.Time)
	if now.Before(next) {
		return ctrl.Result{RequeueAfter: next.Sub(now)}, nil
	}
	w.Status.ObservedGeneration = 0 // the next pass starts a new round
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// releaseGatedPods removes the gate of the pods waiting for this warm-up; a pod without a
// required node affinity gets one toward the ready nodes (allowed while it is gated).
func (r *Reconciler) releaseGatedPods(ctx context.Context, w *spokev1.SpokeWarmup) error {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(w.Namespace),
		client.MatchingLabels{WarmupLabel: w.Name, RoleLabel: RoleGated}); err != nil {
		return err
	}
	ready := readyNodes(w)
	for i := range pods.Items {
		p := &pods.Items[i]
		if !ReleaseGate(p, ready) {
			continue
		}
		if err := r.Client.Update(ctx, p); err != nil {
			return fmt.Errorf("releasing pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		r.Recorder.Eventf(p, corev1.EventTypeNormal, "WarmupReady", "SpokeWarmup %s is Ready on %v: scheduling gate removed", w.Name, ready)
	}
	return nil
}

func readyNodes(w *spokev1.SpokeWarmup) []string {
	var out []string
	for _, n := range w.Status.Nodes {
		if n.Percent >= ReadyPercent(w) {
			out = append(out, n.Node)
		}
	}
	return out
}

// ReleaseGate removes SchedulingGate from the pod and, when it has no required node affinity,
// requires one of nodes. False when the pod carries no such gate.
func ReleaseGate(p *corev1.Pod, nodes []string) bool {
	gates := p.Spec.SchedulingGates[:0:0]
	for _, g := range p.Spec.SchedulingGates {
		if g.Name != SchedulingGate {
			gates = append(gates, g)
		}
	}
	if len(gates) == len(p.Spec.SchedulingGates) {
		return false
	}
	p.Spec.SchedulingGates = gates
	if len(nodes) == 0 {
		return true
	}
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := p.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes,
			}}}},
		}
	}
	return true
}

// finalize: workers deleted, the dataset's labels taken off the nodes, then the finalizer.
func (r *Reconciler) finalize(ctx context.Context, w *spokev1.SpokeWarmup) error {
	if !controllerutil.ContainsFinalizer(w, Finalizer) {
		return nil
	}
	if err := r.deleteWorkers(ctx, w); err != nil {
		return err
	}
	if w.Status.DatasetLabel != "" {
		for _, n := range w.Status.Nodes {
			if err := r.setNodeLabel(ctx, n.Node, w.Status.DatasetLabel, nil); err != nil {
				return err
			}
		}
	}
	controllerutil.RemoveFinalizer(w, Finalizer)
	return r.Client.Update(ctx, w)
}

// podToWarmup maps a worker or gated pod to its warm-up.
func podToWarmup() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[WarmupLabel]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
}
