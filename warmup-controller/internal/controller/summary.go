package controller

import (
	"fmt"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

// ReadyPercent of a spec, 100 when unset.
func ReadyPercent(w *spokev1.SpokeWarmup) int32 {
	if w.Spec.ReadyPercent <= 0 {
		return 100
	}
	return w.Spec.ReadyPercent
}

// summarize sets phase, percent (mean over the nodes), nodesReady and the Ready condition.
func (r *Reconciler) summarize(w *spokev1.SpokeWarmup) {
	st := &w.Status
	threshold := ReadyPercent(w)
	ready, failed := 0, 0
	var sum int64
	for _, n := range st.Nodes {
		sum += int64(n.Percent)
		if n.Percent >= threshold {
			ready++
		}
		if n.Phase == spokev1.PhaseFailed {
			failed++
		}
	}
	st.Percent = int32(sum / int64(len(st.Nodes)))
	st.NodesReady = fmt.Sprintf("%d/%d", ready, len(st.Nodes))
	now := r.Now()
	switch {
	case ready == len(st.Nodes):
		st.Phase = spokev1.PhaseReady
		setReady(w, true, "Warm", fmt.Sprintf("every node holds at least %d%%", threshold), now)
	case failed > 0:
		st.Phase = spokev1.PhaseFailed
		setReady(w, false, "NodeFailed", fmt.Sprintf("%d of %d nodes failed", failed, len(st.Nodes)), now)
	default:
		st.Phase = spokev1.PhaseRunning
		setReady(w, false, "Warming", fmt.Sprintf("%s nodes hold %d%%", st.NodesReady, threshold), now)
	}
}

func setReady(w *spokev1.SpokeWarmup, ok bool, reason, msg string, now time.Time) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{
		Type: spokev1.ConditionReady, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: w.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}

func readyMessage(w *spokev1.SpokeWarmup) string {
	if c := meta.FindStatusCondition(w.Status.Conditions, spokev1.ConditionReady); c != nil {
		return c.Message
	}
	return ""
}

func statusEqual(a, b *spokev1.SpokeWarmupStatus) bool { return reflect.DeepEqual(a, b) }
