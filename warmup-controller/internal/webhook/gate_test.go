package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/spoke-csi/spoke/warmup-controller/internal/controller"
)

func request(t *testing.T, annotations map[string]string) admission.Request {
	pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: annotations}}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Object: runtime.RawExtension{Raw: raw}}}
}

func handler() *GatePods {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	return &GatePods{Decoder: admission.NewDecoder(s)}
}

func TestAnnotatedPodIsGatedAndLabelled(t *testing.T) {
	resp := handler().Handle(context.Background(), request(t, map[string]string{controller.WaitForAnnotation: "imagenet"}))
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("response %+v", resp)
	}
	var paths []string
	for _, p := range resp.Patches {
		paths = append(paths, p.Path)
	}
	joined := strings.Join(paths, " ")
	if !strings.Contains(joined, "/spec/schedulingGates") || !strings.Contains(joined, "/metadata/labels") {
		t.Errorf("patches touch %s", joined)
	}
}

func TestPodWithoutAnnotationIsLeftAlone(t *testing.T) {
	resp := handler().Handle(context.Background(), request(t, nil))
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("response %+v", resp)
	}
}

func TestBadWarmupNameIsRefusedNamingTheAnnotation(t *testing.T) {
	resp := handler().Handle(context.Background(), request(t, map[string]string{controller.WaitForAnnotation: "Not_A_Name"}))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "metadata.annotations[spoke.csi.dev/wait-for]") {
		t.Fatalf("response %+v", resp.Result)
	}
}

func TestGateIsAddedOnce(t *testing.T) {
	p := &corev1.Pod{}
	Gate(p, "w")
	Gate(p, "w")
	if len(p.Spec.SchedulingGates) != 1 || p.Labels[controller.RoleLabel] != controller.RoleGated {
		t.Fatalf("%+v %+v", p.Spec.SchedulingGates, p.Labels)
	}
}
