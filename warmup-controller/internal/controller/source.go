package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

// SelectedNodeAnnotation: where a WaitForFirstConsumer claim is provisioned. The scheduler
// sets it for pods; the controller's own claim has no scheduled pod until its worker runs, and
// a worker is pinned with nodeName, which bypasses the scheduler.
const SelectedNodeAnnotation = "volume.kubernetes.io/selected-node"

// SourcePVCName is the claim the workers mount: spec.source.pvc, or for a StorageClass source
// the one the controller makes, named after the warm-up.
func SourcePVCName(w *spokev1.SpokeWarmup) string {
	if w.Spec.Source.PVC != "" {
		return w.Spec.Source.PVC
	}
	return "spoke-warmup-" + w.Name
}

// SourceText names the source in events and messages.
func SourceText(w *spokev1.SpokeWarmup) string {
	s := w.Spec.Source
	if s.PVC != "" {
		return "PVC " + s.PVC
	}
	if s.SubDir != "" {
		return fmt.Sprintf("StorageClass %s, directory %s", s.StorageClass, s.SubDir)
	}
	return "StorageClass " + s.StorageClass
}

// ClassSourceProblem says why a StorageClass cannot be a warm-up's source ("" when it can):
// it must be this driver's, and of dataset volumes: a scratch class gives every claim a new,
// empty directory, which no job's claim would ever share.
func ClassSourceProblem(sc *storagev1.StorageClass, driver string) string {
	if sc.Provisioner != driver {
		return fmt.Sprintf("spec.source.storageClass: StorageClass %s is provisioned by %s, not by %s",
			sc.Name, sc.Provisioner, driver)
	}
	if mode := sc.Parameters["mode"]; mode != "dataset" {
		if mode == "" {
			mode = "scratch, the default"
		}
		return fmt.Sprintf("spec.source.storageClass: StorageClass %s makes scratch volumes (mode %s): "+
			"each claim gets a new, empty directory, so there is nothing to warm; warm a PVC of it "+
			"with spec.source.pvc", sc.Name, mode)
	}
	return ""
}

// SourceClaim is the ReadOnlyMany claim of a StorageClass source, owned by the warm-up (so
// deleted with it). `node` is set as the selected node when the class binds on first use.
func SourceClaim(w *spokev1.SpokeWarmup, sc *storagev1.StorageClass, node string) *corev1.PersistentVolumeClaim {
	yes := true
	class := sc.Name
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SourcePVCName(w),
			Namespace: w.Namespace,
			Labels:    map[string]string{WarmupLabel: w.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: spokev1.GroupVersion.String(), Kind: "SpokeWarmup",
				Name: w.Name, UID: w.UID, Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			// A dataset volume records the capacity and enforces none.
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi"),
			}},
		},
	}
	if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
		pvc.Annotations = map[string]string{SelectedNodeAnnotation: node}
	}
	return pvc
}

// ensureSourceClaim makes the claim of a StorageClass source; msg says why there is none yet
// (a bad class, a claim of that name that is not the warm-up's, one of another class being
// replaced). Needs the round's nodes: a class that binds on first use is provisioned for the
// first of them.
func (r *Reconciler) ensureSourceClaim(ctx context.Context, w *spokev1.SpokeWarmup) (string, error) {
	var sc storagev1.StorageClass
	if err := r.Client.Get(ctx, types.NamespacedName{Name: w.Spec.Source.StorageClass}, &sc); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("spec.source.storageClass: StorageClass %s not found", w.Spec.Source.StorageClass), nil
		}
		return "", err
	}
	if msg := ClassSourceProblem(&sc, r.DriverName); msg != "" {
		return msg, nil
	}
	key := types.NamespacedName{Namespace: w.Namespace, Name: SourcePVCName(w)}
	var pvc corev1.PersistentVolumeClaim
	err := r.Client.Get(ctx, key, &pvc)
	if apierrors.IsNotFound(err) {
		if err := r.Client.Create(ctx, SourceClaim(w, &sc, w.Status.Nodes[0].Node)); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
		return fmt.Sprintf("PVC %s of StorageClass %s created for the warm-up; waiting for it to bind", key, sc.Name), nil
	}
	if err != nil {
		return "", err
	}
	if !metav1.IsControlledBy(&pvc, w) {
		return fmt.Sprintf("spec.source.storageClass: PVC %s exists and is not this warm-up's; "+
			"delete it or rename the warm-up", key), nil
	}
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != sc.Name {
		// The spec moved to another class: the old claim goes (the new round's workers are
		// gone already), the next pass makes the new one.
		if pvc.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, &pvc); err != nil && !apierrors.IsNotFound(err) {
				return "", err
			}
		}
		return fmt.Sprintf("PVC %s is of another StorageClass; replacing it", key), nil
	}
	return "", nil
}
