package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

// classWorld: the world of reconciler_test with the warm-up's source turned into StorageClass
// `class` (sub-directory "train") and the class added.
func classWorld(t *testing.T, class *storagev1.StorageClass) *world {
	w := newWorld(t)
	w.r.DriverName = "spoke.csi.dev"
	ctx := context.Background()
	if err := w.c.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	o := w.warmup()
	o.Spec.Source = spokev1.WarmupSource{StorageClass: class.Name, SubDir: "train"}
	if err := w.c.Update(ctx, o); err != nil {
		t.Fatal(err)
	}
	return w
}

func datasetClass(binding storagev1.VolumeBindingMode) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "datasets"}, Provisioner: "spoke.csi.dev",
		Parameters: map[string]string{"mode": "dataset", "subDir": "datasets/e2e"}, VolumeBindingMode: &binding}
}

func (w *world) readyMessage() string {
	for _, c := range w.warmup().Status.Conditions {
		if c.Type == spokev1.ConditionReady {
			return c.Message
		}
	}
	return ""
}

// bindClaim binds the controller's claim to pv1 (the volume of reconciler_test's world), as
// the provisioner would.
func (w *world) bindClaim(name string) {
	var pvc corev1.PersistentVolumeClaim
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &pvc); err != nil {
		w.t.Fatal(err)
	}
	pvc.Spec.VolumeName = "pv1"
	if err := w.c.Update(context.Background(), &pvc); err != nil {
		w.t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if err := w.c.Status().Update(context.Background(), &pvc); err != nil {
		w.t.Fatal(err)
	}
}

func TestAStorageClassSourceClaimsTheClassVolumeAndWarmsItsSubDir(t *testing.T) {
	w := classWorld(t, datasetClass(storagev1.VolumeBindingWaitForFirstConsumer))
	w.reconcile() // finalizer
	w.reconcile() // new round, nodes, the claim
	var pvc corev1.PersistentVolumeClaim
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "spoke-warmup-w"}, &pvc); err != nil {
		t.Fatalf("no claim for the StorageClass source: %v", err)
	}
	if *pvc.Spec.StorageClassName != "datasets" || pvc.Spec.AccessModes[0] != corev1.ReadOnlyMany ||
		!metav1.IsControlledBy(&pvc, w.warmup()) || pvc.Annotations[SelectedNodeAnnotation] != "node-a" {
		t.Fatalf("claim: class %v modes %v owners %v annotations %v", *pvc.Spec.StorageClassName,
			pvc.Spec.AccessModes, pvc.OwnerReferences, pvc.Annotations)
	}
	if st := w.warmup().Status; st.Phase != spokev1.PhasePending || !strings.Contains(w.readyMessage(), "waiting for it to bind") {
		t.Fatalf("before the claim binds: %s %q", st.Phase, w.readyMessage())
	}
	w.bindClaim("spoke-warmup-w")
	w.reconcile()
	p, ok := w.pod(WorkerPodName("w", "node-a"))
	if !ok {
		t.Fatal("no worker once the claim is bound")
	}
	env := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "spoke-warmup-w" || env["SUBDIR"] != "train" || env["VOLUME"] != handle {
		t.Fatalf("worker: claim %s env %v", p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName, env)
	}
	if w.warmup().Status.DatasetLabel != DatasetLabelKey(handle) {
		t.Error("the dataset label must be the class volume's, as for any PVC of the class")
	}
}

func TestAnImmediateClassClaimHasNoSelectedNode(t *testing.T) {
	w := classWorld(t, datasetClass(storagev1.VolumeBindingImmediate))
	w.reconcile()
	w.reconcile()
	var pvc corev1.PersistentVolumeClaim
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "spoke-warmup-w"}, &pvc); err != nil {
		t.Fatal(err)
	}
	if _, set := pvc.Annotations[SelectedNodeAnnotation]; set {
		t.Errorf("an Immediate class's claim got %s", SelectedNodeAnnotation)
	}
}

func TestBadStorageClassSourcesLeaveTheWarmupPendingNamingTheField(t *testing.T) {
	scratch := datasetClass(storagev1.VolumeBindingImmediate)
	scratch.Parameters = map[string]string{"subDir": "${pvc.metadata.name}"}
	other := datasetClass(storagev1.VolumeBindingImmediate)
	other.Provisioner = "ebs.csi.aws.com"
	for name, tc := range map[string]struct {
		class *storagev1.StorageClass
		want  string
	}{
		"scratch":  {scratch, "makes scratch volumes (mode scratch, the default)"},
		"provider": {other, "is provisioned by ebs.csi.aws.com, not by spoke.csi.dev"},
	} {
		t.Run(name, func(t *testing.T) {
			w := classWorld(t, tc.class)
			w.reconcile()
			w.reconcile()
			msg := w.readyMessage()
			if w.warmup().Status.Phase != spokev1.PhasePending || !strings.HasPrefix(msg, "spec.source.storageClass: ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("phase %s, message %q", w.warmup().Status.Phase, msg)
			}
			var pvcs corev1.PersistentVolumeClaimList
			_ = w.c.List(context.Background(), &pvcs, client.InNamespace("ns"))
			if len(pvcs.Items) != 1 {
				t.Errorf("a claim was made for a refused class: %d claims", len(pvcs.Items))
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		w := classWorld(t, datasetClass(storagev1.VolumeBindingImmediate))
		o := w.warmup()
		o.Spec.Source.StorageClass = "nope"
		_ = w.c.Update(context.Background(), o)
		w.reconcile()
		w.reconcile()
		if msg := w.readyMessage(); msg != "spec.source.storageClass: StorageClass nope not found" {
			t.Fatalf("message %q", msg)
		}
	})
}

func TestAClaimOfTheSameNameThatIsNotTheWarmupsIsNotTaken(t *testing.T) {
	w := classWorld(t, datasetClass(storagev1.VolumeBindingImmediate))
	class := "datasets"
	foreign := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "spoke-warmup-w", Namespace: "ns"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class}}
	if err := w.c.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	w.reconcile()
	w.reconcile()
	if msg := w.readyMessage(); !strings.Contains(msg, "exists and is not this warm-up's") {
		t.Fatalf("message %q", msg)
	}
	if _, ok := w.pod(WorkerPodName("w", "node-a")); ok {
		t.Fatal("a worker mounted a claim that is not the warm-up's")
	}
}
