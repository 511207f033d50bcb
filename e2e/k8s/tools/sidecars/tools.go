//go:build tools

// Package tools pins the csi-provisioner command.
package tools

import _ "github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner"
