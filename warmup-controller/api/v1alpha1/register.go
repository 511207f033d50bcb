package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion of the API.
var GroupVersion = schema.GroupVersion{Group: "spoke.csi.dev", Version: "v1alpha1"}

var schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

// AddToScheme adds SpokeWarmup and SpokeWarmupList to a scheme.
var AddToScheme = schemeBuilder.AddToScheme

func init() {
	schemeBuilder.Register(&SpokeWarmup{}, &SpokeWarmupList{})
}

// DeepCopyObject implements runtime.Object.
func (w *SpokeWarmup) DeepCopyObject() runtime.Object { return w.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *SpokeWarmupList) DeepCopyObject() runtime.Object {
	out := &SpokeWarmupList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]SpokeWarmup, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopy()
	}
	return out
}

// DeepCopyInto copies every field into out.
func (w *SpokeWarmup) DeepCopyInto(out *SpokeWarmup) { *out = *w.DeepCopy() }

// DeepCopy copies every field (slices, maps and pointers included).
func (w *SpokeWarmup) DeepCopy() *SpokeWarmup {
	if w == nil {
		return nil
	}
	out := &SpokeWarmup{TypeMeta: w.TypeMeta, Spec: w.Spec, Status: w.Status}
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	s := &out.Spec
	s.Paths.Prefixes = append([]string(nil), w.Spec.Paths.Prefixes...)
	if w.Spec.Nodes.NodeSelector != nil {
		s.Nodes.NodeSelector = make(map[string]string, len(w.Spec.Nodes.NodeSelector))
		for k, v := range w.Spec.Nodes.NodeSelector {
			s.Nodes.NodeSelector[k] = v
		}
	}
	s.Nodes.PodSelector = w.Spec.Nodes.PodSelector.DeepCopy()
	if w.Spec.Nodes.Count != nil {
		c := *w.Spec.Nodes.Count
		s.Nodes.Count = &c
	}
	st := &out.Status
	st.Nodes = append([]NodeProgress(nil), w.Status.Nodes...)
	st.Conditions = nil
	for i := range w.Status.Conditions {
		var c metav1.Condition
		w.Status.Conditions[i].DeepCopyInto(&c)
		st.Conditions = append(st.Conditions, c)
	}
	st.LastCompletion = w.Status.LastCompletion.DeepCopy()
	return out
}
