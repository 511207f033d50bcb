package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

const handle = "spoke:hub/export/datasets/e2e"

// world: a bound PVC on a CSI PV, one Ready node, a warm-up of count 1 and a gated pod.
type world struct {
	t      *testing.T
	c      client.Client
	r      *Reconciler
	events *record.FakeRecorder
	logs   map[string]string // pod -> last line
}

func newWorld(t *testing.T) *world {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = spokev1.AddToScheme(s)
	one := int32(1)
	node := readyNode("node-a", nil)
	objs := []client.Object{
		&node,
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: "spoke.csi.dev", VolumeHandle: handle}}}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns"},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}},
		&spokev1.SpokeWarmup{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", Generation: 1},
			Spec: spokev1.SpokeWarmupSpec{Source: spokev1.WarmupSource{PVC: "data"}, Nodes: spokev1.NodeChoice{Count: &one}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ns",
			Labels: map[string]string{WarmupLabel: "w", RoleLabel: RoleGated}},
			Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: SchedulingGate}, {Name: "other"}}}},
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&spokev1.SpokeWarmup{}).Build()
	w := &world{t: t, c: c, events: record.NewFakeRecorder(100), logs: map[string]string{}}
	w.r = w.reconciler()
	return w
}

// reconciler: a fresh one over the same objects, as after a controller restart.
func (w *world) reconciler() *Reconciler {
	return &Reconciler{Client: w.c, Reader: w.c, Recorder: w.events, Now: time.Now,
		Worker: WorkerOptions{Image: "spoke:test", AgentSocketDir: "/run/spoke-host"},
		Logs:   func(_ context.Context, _, pod string) (string, error) { return w.logs[pod], nil }}
}

func (w *world) reconcile() ctrl.Result {
	w.t.Helper()
	res, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "w"}})
	if err != nil {
		w.t.Fatalf("reconcile: %v", err)
	}
	return res
}

func (w *world) warmup() *spokev1.SpokeWarmup {
	var o spokev1.SpokeWarmup
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "w"}, &o); err != nil {
		w.t.Fatal(err)
	}
	return &o
}

func (w *world) pod(name string) (*corev1.Pod, bool) {
	var p corev1.Pod
	err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &p)
	return &p, err == nil
}

func (w *world) setPodPhase(name string, phase corev1.PodPhase) {
	p, ok := w.pod(name)
	if !ok {
		w.t.Fatalf("no pod %s", name)
	}
	p.Status.Phase = phase
	if err := w.c.Status().Update(context.Background(), p); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) nodeLabel() string {
	var n corev1.Node
	_ = w.c.Get(context.Background(), types.NamespacedName{Name: "node-a"}, &n)
	return n.Labels[DatasetLabelKey(handle)]
}

func TestWarmupRunsToReadyAndReleasesGatedPods(t *testing.T) {
	w := newWorld(t)
	worker := WorkerPodName("w", "node-a")
	w.reconcile() // finalizer
	w.reconcile() // worker started
	if _, ok := w.pod(worker); !ok {
		t.Fatal("no worker pod after two passes")
	}
	w.setPodPhase(worker, corev1.PodRunning)
	w.logs[worker] = `1 1 0 0 0 0 0 {"filesTotal":4,"filesDone":2,"bytesTotal":1000,"bytesDone":600,"elapsedSeconds":3}`
	if res := w.reconcile(); res.RequeueAfter == 0 {
		t.Error("a running warm-up must be polled again")
	}
	st := w.warmup().Status
	if st.Phase != spokev1.PhaseRunning || st.Percent != 60 || st.NodesReady != "0/1" || w.nodeLabel() != "50" {
		t.Fatalf("while running: phase %s percent %d ready %s label %q", st.Phase, st.Percent, st.NodesReady, w.nodeLabel())
	}
	if p, _ := w.pod("job"); len(p.Spec.SchedulingGates) != 2 {
		t.Fatal("gated pod released before the warm-up is Ready")
	}
	w.logs[worker] = `1 1 0 0 0 0 0 {"filesTotal":4,"filesDone":4,"bytesTotal":1000,"bytesDone":1000,"done":true,"elapsedSeconds":4}`
	w.setPodPhase(worker, corev1.PodSucceeded)
	w.reconcile()
	if _, ok := w.pod(worker); !ok {
		t.Error("the finished worker was deleted before the status saying Done was written")
	}
	w.reconcile()
	st = w.warmup().Status
	if st.Phase != spokev1.PhaseReady || st.Percent != 100 || st.LastCompletion == nil || w.nodeLabel() != "100" {
		t.Fatalf("after success: %+v label %q", st, w.nodeLabel())
	}
	if _, ok := w.pod(worker); ok {
		t.Error("the finished worker pod (holding the volume staged) was not deleted")
	}
	p, _ := w.pod("job")
	if len(p.Spec.SchedulingGates) != 1 || p.Spec.SchedulingGates[0].Name != "other" {
		t.Errorf("gates after Ready: %+v", p.Spec.SchedulingGates)
	}
	req := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "node-a" {
		t.Errorf("required affinity %+v", req)
	}
	if !hasEvent(w.events, "WarmupReady") {
		t.Error("no WarmupReady event (PVC or pod)")
	}
}

func hasEvent(r *record.FakeRecorder, reason string) bool {
	for {
		select {
		case e := <-r.Events:
			if strings.Contains(e, reason) {
				return true
			}
		default:
			return false
		}
	}
}

func TestRestartedControllerResumesItsWorker(t *testing.T) {
	w := newWorld(t)
	w.reconcile()
	w.reconcile()
	w.r = w.reconciler() // the controller restarts
	w.reconcile()
	st := w.warmup().Status
	if len(st.Nodes) != 1 || st.Nodes[0].Attempts != 1 {
		t.Fatalf("a restarted controller started another worker: %+v", st.Nodes)
	}
}

func TestFailedWorkerIsRetriedThenTheNodeFails(t *testing.T) {
	w := newWorld(t)
	worker := WorkerPodName("w", "node-a")
	w.reconcile()
	for attempt := 1; attempt <= MaxAttempts; attempt++ {
		w.reconcile() // starts attempt
		w.logs[worker] = "spokectl: warmup volume x: agent unavailable"
		w.setPodPhase(worker, corev1.PodFailed)
		w.reconcile() // sees the failure, deletes the pod
		if _, ok := w.pod(worker); ok {
			t.Fatalf("attempt %d: failed worker not deleted", attempt)
		}
	}
	st := w.warmup().Status
	if st.Phase != spokev1.PhaseFailed || !strings.Contains(st.Nodes[0].Message, "agent unavailable (after 3 attempts)") {
		t.Fatalf("after %d failures: %+v", MaxAttempts, st)
	}
}

func TestDeletedWarmupStopsWorkersAndDropsLabels(t *testing.T) {
	w := newWorld(t)
	worker := WorkerPodName("w", "node-a")
	w.reconcile()
	w.reconcile()
	w.setPodPhase(worker, corev1.PodRunning)
	w.logs[worker] = `1 1 0 0 0 0 0 {"bytesTotal":100,"bytesDone":30}`
	w.reconcile()
	if w.nodeLabel() != "25" {
		t.Fatalf("label %q", w.nodeLabel())
	}
	if err := w.c.Delete(context.Background(), w.warmup()); err != nil {
		t.Fatal(err)
	}
	w.reconcile()
	if _, ok := w.pod(worker); ok {
		t.Error("worker pod left after the warm-up was deleted")
	}
	if w.nodeLabel() != "" {
		t.Errorf("node label %q left after the warm-up was deleted", w.nodeLabel())
	}
	var o spokev1.SpokeWarmup
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "w"}, &o); err == nil {
		t.Error("finalizer not removed")
	}
}

func TestMissingPVCIsPendingAndNamesTheField(t *testing.T) {
	w := newWorld(t)
	o := w.warmup()
	o.Spec.Source.PVC = "nope"
	o.Generation = 2
	if err := w.c.Update(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	w.reconcile()
	w.reconcile()
	st := w.warmup().Status
	if st.Phase != spokev1.PhasePending || !strings.Contains(readyMessage(w.warmup()), "spec.source.pvc: PVC ns/nope not found") {
		t.Fatalf("status %+v", st)
	}
}

func TestRateLimitOutOfRangeIsPendingAndNamesTheField(t *testing.T) {
	w := newWorld(t)
	o := w.warmup()
	o.Spec.RateLimit = "2Ti" // the schema's pattern lets it through; spokectl takes at most 1Ti
	o.Generation = 2
	if err := w.c.Update(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	w.reconcile()
	w.reconcile()
	if _, ok := w.pod(WorkerPodName("w", "node-a")); ok {
		t.Error("a worker was started for a rateLimit spokectl refuses")
	}
	st := w.warmup().Status
	if st.Phase != spokev1.PhasePending || !strings.Contains(readyMessage(w.warmup()), "spec.rateLimit") ||
		!hasEvent(w.events, "InvalidSpec") {
		t.Fatalf("status %+v", st)
	}
	// Fixed: the next generation runs, its worker passes the rate and the verify flag on.
	o = w.warmup()
	o.Spec.RateLimit, o.Spec.Verify = "50Mi", true
	o.Generation = 3
	if err := w.c.Update(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	w.reconcile()
	w.reconcile()
	p, ok := w.pod(WorkerPodName("w", "node-a"))
	if !ok {
		t.Fatal("no worker after the rateLimit was fixed")
	}
	env := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["RATE"] != "52428800" || env["VERIFY"] != "1" {
		t.Errorf("worker env %v", env)
	}
}

// finish runs the world's warm-up to Ready with its worker succeeded.
func (w *world) finish() {
	worker := WorkerPodName("w", "node-a")
	w.reconcile()
	w.reconcile()
	w.logs[worker] = `1 1 0 0 0 0 0 {"bytesTotal":10,"bytesDone":10,"done":true}`
	w.setPodPhase(worker, corev1.PodSucceeded)
	w.reconcile()
}

func TestCronStartsANewRoundAtTheNextTime(t *testing.T) {
	w := newWorld(t)
	o := w.warmup()
	o.Spec.Schedule = spokev1.Schedule{Mode: spokev1.ScheduleCron, Cron: "0 * * * *"}
	if err := w.c.Update(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 10, 20, 0, 0, time.UTC)
	w.r.Now = func() time.Time { return now }
	w.finish()
	st := w.warmup().Status
	if st.Phase != spokev1.PhaseReady || st.Round != 1 {
		t.Fatalf("first round: %+v", st)
	}
	if res := w.reconcile(); res.RequeueAfter != 40*time.Minute {
		t.Errorf("waits %v for 11:00, want 40m", res.RequeueAfter)
	}
	now = now.Add(41 * time.Minute)
	w.reconcile() // notices the cron time
	w.reconcile() // new round: a new worker
	st = w.warmup().Status
	if st.Round != 2 || st.Nodes[0].Phase != spokev1.PhaseRunning || st.Nodes[0].Attempts != 1 {
		t.Fatalf("after the cron time: %+v", st)
	}
	if _, ok := w.pod(WorkerPodName("w", "node-a")); !ok {
		t.Error("no worker for the new round")
	}
}

func TestOnceDoesNotRunAgain(t *testing.T) {
	w := newWorld(t)
	w.finish()
	if res := w.reconcile(); res.RequeueAfter != 0 {
		t.Errorf("a finished Once warm-up is polled again after %v", res.RequeueAfter)
	}
	if _, ok := w.pod(WorkerPodName("w", "node-a")); ok {
		t.Error("a finished Once warm-up started another worker")
	}
}

// A pass whose status write is lost (a conflict) must not start the node over: the next pass
// works from the old status and finds the pod.
func TestLostStatusWriteDoesNotRestartTheNode(t *testing.T) {
	w := newWorld(t)
	worker := WorkerPodName("w", "node-a")
	w.reconcile()
	w.reconcile()
	before := w.warmup() // Running, attempt 1
	w.logs[worker] = `1 1 0 0 0 0 0 {"bytesTotal":10,"bytesDone":10,"done":true}`
	w.setPodPhase(worker, corev1.PodSucceeded)
	w.reconcile() // Done written...
	lost := w.warmup()
	lost.Status = before.Status // ...and lost
	if err := w.c.Status().Update(context.Background(), lost); err != nil {
		t.Fatal(err)
	}
	w.reconcile()
	w.reconcile()
	st := w.warmup().Status
	if st.Nodes[0].Phase != NodeDone || st.Nodes[0].Attempts != 1 {
		t.Fatalf("after a lost status write: %+v", st.Nodes[0])
	}
	if _, ok := w.pod(worker); ok {
		t.Error("the finished worker was not deleted once Done was written")
	}
}

// A pod gated after its warm-up was already Ready (and its worker gone) is released too.
func TestPodGatedAfterReadyIsReleased(t *testing.T) {
	w := newWorld(t)
	w.finish()
	w.reconcile()
	late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "ns",
		Labels: map[string]string{WarmupLabel: "w", RoleLabel: RoleGated}},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: SchedulingGate}}}}
	if err := w.c.Create(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	w.reconcile() // the pod's event maps to the warm-up
	p, _ := w.pod("late")
	if len(p.Spec.SchedulingGates) != 0 {
		t.Errorf("late pod still gated: %+v", p.Spec.SchedulingGates)
	}
}

// The pod cache lags the status: a pass that does not see the worker yet must not count
// another attempt.
func TestStalePodCacheDoesNotCountAnotherAttempt(t *testing.T) {
	w := newWorld(t)
	w.reconcile()
	w.reconcile() // worker created, attempt 1
	worker := WorkerPodName("w", "node-a")
	stale := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Pod); ok && key.Name == worker {
			return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	w.r.Client = interceptor.NewClient(w.c.(client.WithWatch), stale)
	w.reconcile()
	if n := w.warmup().Status.Nodes[0]; n.Attempts != 1 || n.Phase != spokev1.PhaseRunning {
		t.Fatalf("after a pass with a stale pod cache: %+v", n)
	}
}

// Right after a round started the cache may still show the generation unobserved: that must
// not start another round (which deletes the workers).
func TestStaleWarmupCacheDoesNotRestartTheRound(t *testing.T) {
	w := newWorld(t)
	w.reconcile()
	stale := w.warmup() // finalizer on, no round yet
	w.reconcile()       // round 1, worker created
	worker := WorkerPodName("w", "node-a")
	old := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if o, ok := obj.(*spokev1.SpokeWarmup); ok {
			stale.DeepCopyInto(o)
			return nil
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	w.r.Client = interceptor.NewClient(w.c.(client.WithWatch), old)
	w.reconcile()
	if _, ok := w.pod(worker); !ok {
		t.Fatal("a stale cached warm-up deleted the running worker")
	}
	if st := w.warmup().Status; st.Round != 1 {
		t.Errorf("round %d after a stale pass, want 1", st.Round)
	}
}

// The warm-up's status reads Ready before a gated pod loses its gate: nothing watching the
// warm-up sees its pod scheduled while it still reads Running.
func TestStatusSaysReadyBeforeTheGateIsRemoved(t *testing.T) {
	w := newWorld(t)
	worker := WorkerPodName("w", "node-a")
	checked := false
	w.r.Client = interceptor.NewClient(w.c.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if p, ok := obj.(*corev1.Pod); ok && p.Name == "job" && len(p.Spec.SchedulingGates) < 2 {
				var o spokev1.SpokeWarmup
				if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "w"}, &o); err != nil {
					return err
				}
				if o.Status.Phase != spokev1.PhaseReady || o.Status.LastCompletion == nil {
					t.Errorf("gate removed while the stored warm-up reads %q", o.Status.Phase)
				}
				checked = true
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	w.reconcile()
	w.reconcile()
	w.setPodPhase(worker, corev1.PodSucceeded)
	w.logs[worker] = `1 1 0 0 0 0 0 {"filesTotal":1,"filesDone":1,"bytesTotal":10,"bytesDone":10,"done":true}`
	w.reconcile()
	w.reconcile()
	if !checked {
		t.Fatalf("the gated pod was not released: %+v", w.warmup().Status)
	}
}
