//go:build tools

// Package tools pins kubeadm, which the kind node image runs (e2e/kind), at the version of
// the Kubernetes binaries e2e/k8s builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubeadm"
)
