package controller

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

// nodeUsable: Ready and schedulable (a warm-up on a node no pod can land on helps nobody).
func nodeUsable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ChooseNodes picks the nodes of a NodeChoice, sorted by name. pods are the pods of the
// warm-up's namespace (used by podSelector only). The error names the spec field.
func ChooseNodes(choice spokev1.NodeChoice, nodes []corev1.Node, pods []corev1.Pod) ([]string, error) {
	var out []string
	switch {
	case choice.NodeSelector != nil:
		sel := labels.SelectorFromSet(choice.NodeSelector)
		for i := range nodes {
			if nodeUsable(&nodes[i]) && sel.Matches(labels.Set(nodes[i].Labels)) {
				out = append(out, nodes[i].Name)
			}
		}
	case choice.PodSelector != nil:
		sel, err := metav1.LabelSelectorAsSelector(choice.PodSelector)
		if err != nil {
			return nil, fmt.Errorf("spec.nodes.podSelector: %v", err)
		}
		seen := map[string]bool{}
		for _, p := range pods {
			if p.Spec.NodeName != "" && !seen[p.Spec.NodeName] && sel.Matches(labels.Set(p.Labels)) {
				seen[p.Spec.NodeName] = true
				out = append(out, p.Spec.NodeName)
			}
		}
	case choice.Count != nil:
		for i := range nodes {
			if nodeUsable(&nodes[i]) {
				out = append(out, nodes[i].Name)
			}
		}
		sort.Strings(out)
		if int(*choice.Count) < len(out) {
			out = out[:*choice.Count]
		}
	default:
		return nil, fmt.Errorf("spec.nodes: set one of nodeSelector, podSelector, count")
	}
	sort.Strings(out)
	return out, nil
}
