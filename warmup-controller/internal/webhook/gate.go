// Package webhook is the mutating admission webhook that holds pods annotated
// spoke.csi.dev/wait-for behind a scheduling gate until their warm-up is Ready.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/spoke-csi/spoke/warmup-controller/internal/controller"
)

// Path the webhook is served at (the chart's MutatingWebhookConfiguration names it).
const Path = "/mutate-pods-wait-for"

// GatePods adds the gate and the labels the controller finds gated pods by.
type GatePods struct {
	Decoder admission.Decoder
}

// Handle gates a new pod that names a warm-up; refuses one whose annotation is not a name.
func (g *GatePods) Handle(_ context.Context, req admission.Request) admission.Response {
	pod := &corev1.Pod{}
	if err := g.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	name, ok := pod.Annotations[controller.WaitForAnnotation]
	if !ok {
		return admission.Allowed("no " + controller.WaitForAnnotation + " annotation")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > 63 {
		return admission.Denied(fmt.Sprintf("metadata.annotations[%s]: %q is not a SpokeWarmup name (DNS-1123, at most 63 characters)",
			controller.WaitForAnnotation, name))
	}
	Gate(pod, name)
	raw, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// Gate adds the scheduling gate (once) and the warm-up's labels to a pod.
func Gate(pod *corev1.Pod, warmup string) {
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[controller.WarmupLabel] = warmup
	pod.Labels[controller.RoleLabel] = controller.RoleGated
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == controller.SchedulingGate {
			return
		}
	}
	pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: controller.SchedulingGate})
}
