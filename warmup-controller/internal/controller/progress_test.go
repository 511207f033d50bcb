package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

func TestParseLineAndPercent(t *testing.T) {
	l, err := ParseLine(`2 4 100 100 1 1 80 {"filesTotal":10,"filesDone":5,"bytesTotal":1000,"bytesDone":500,"bytesFromHub":400,"done":false,"error":"","elapsedSeconds":2}`)
	if err != nil {
		t.Fatal(err)
	}
	if l.Step != 2 || l.Steps != 4 || l.BytesDone != 500 {
		t.Fatalf("parsed %+v", l)
	}
	// One path of four done, the second half done: 1.5/4.
	if got := l.Percent(); got != 37 {
		t.Errorf("percent %d, want 37", got)
	}
	var n spokev1.NodeProgress
	l.Apply(&n)
	if n.BytesDone != 600 || n.BytesTotal != 1100 || n.FilesTotal != 11 || n.BytesFromHub != 480 {
		t.Errorf("sums of the finished paths and the current one: %+v", n)
	}
	if n.BytesPerSecond != 250 || n.ETASeconds != 2 || n.Message != "path 2 of 4" {
		t.Errorf("applied %+v", n)
	}
	done, _ := ParseLine(`1 1 0 0 0 0 0 {"bytesTotal":0,"bytesDone":0,"done":true}`)
	if done.Percent() != 100 {
		t.Errorf("an empty path that is done is 100%%, got %d", done.Percent())
	}
	verifying, _ := ParseLine(`1 1 0 0 0 0 0 0 0 0 {"bytesTotal":10,"bytesDone":10,"blocksVerified":3,"done":false}`)
	if verifying.Percent() != 99 {
		t.Errorf("every byte cached but spokectl not done (its verify pass runs) is 99%%, got %d", verifying.Percent())
	}
	failed, _ := ParseLine(`1 1 0 0 0 0 0 {"bytesTotal":10,"bytesDone":5,"done":true,"error":"EIO"}`)
	if failed.Percent() != 50 {
		t.Errorf("a failed path counts its bytes only, got %d", failed.Percent())
	}
}

func TestParseLineNamesWhatIsWrong(t *testing.T) {
	for in, want := range map[string]string{
		"1 2":                              "want \"STEP STEPS BD BT FD FT HUB VER REP CHG {json}\"",
		"1 1 0 0 0 0 0 0 {}":               "want \"STEP STEPS BD BT FD FT HUB VER REP CHG {json}\"",
		"1 1 0 0 0 0 0":                    "want \"STEP STEPS BD BT FD FT HUB VER REP CHG {json}\"",
		"spokectl: no agent at /run x y z": "field 1 (\"spokectl:\") is not a count",
		"3 2 0 0 0 0 0 {}":                 "step 3 of 2",
		"1 1 0 0 -5 0 0 {}":                "field 5 (\"-5\") is not a count",
		"1 1 0 0 0 0 0 {not json":          "invalid character",
	} {
		if _, err := ParseLine(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLine(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

func TestBucket(t *testing.T) {
	for p, want := range map[int32]int32{0: 0, 24: 0, 25: 25, 74: 50, 89: 75, 90: 90, 99: 90, 100: 100} {
		if got := Bucket(p); got != want {
			t.Errorf("Bucket(%d) = %d, want %d", p, got, want)
		}
	}
}

func TestNamesAreStableAndValid(t *testing.T) {
	k := DatasetLabelKey("hub/share/datasets/e2e")
	if k != DatasetLabelKey("hub/share/datasets/e2e") || k == DatasetLabelKey("hub/share/other") {
		t.Errorf("label key not a function of the handle: %s", k)
	}
	if !strings.HasPrefix(k, LabelPrefix) || len(k)-len(LabelPrefix) != 12 {
		t.Errorf("label key %q", k)
	}
	long := strings.Repeat("a", 63)
	name := WorkerPodName(long, "node-1")
	if len(name) > 63 || name == WorkerPodName(long, "node-2") {
		t.Errorf("worker pod name %q (%d chars) must fit a label and differ per node", name, len(name))
	}
}

func readyNode(name string, labels map[string]string) corev1.Node {
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

func TestChooseNodes(t *testing.T) {
	nodes := []corev1.Node{
		readyNode("c", map[string]string{"gpu": "a100"}),
		readyNode("a", map[string]string{"gpu": "a100"}),
		readyNode("b", nil),
	}
	cordoned := readyNode("d", map[string]string{"gpu": "a100"})
	cordoned.Spec.Unschedulable = true
	nodes = append(nodes, cordoned)
	got, err := ChooseNodes(spokev1.NodeChoice{NodeSelector: map[string]string{"gpu": "a100"}}, nodes, nil)
	if err != nil || strings.Join(got, ",") != "a,c" {
		t.Errorf("nodeSelector: %v %v", got, err)
	}
	two := int32(2)
	got, _ = ChooseNodes(spokev1.NodeChoice{Count: &two}, nodes, nil)
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("count: %v", got)
	}
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "train"}}, Spec: corev1.PodSpec{NodeName: "c"}},
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "train"}}, Spec: corev1.PodSpec{NodeName: "c"}},
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "eval"}}, Spec: corev1.PodSpec{NodeName: "b"}},
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "train"}}}, // not scheduled
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"job": "train"}}
	got, _ = ChooseNodes(spokev1.NodeChoice{PodSelector: sel}, nodes, pods)
	if strings.Join(got, ",") != "c" {
		t.Errorf("podSelector: %v", got)
	}
	if _, err := ChooseNodes(spokev1.NodeChoice{}, nodes, nil); err == nil || !strings.Contains(err.Error(), "spec.nodes") {
		t.Errorf("no choice: %v", err)
	}
}

func TestWorkerPodHasNoTokenAndIsPinned(t *testing.T) {
	w := &spokev1.SpokeWarmup{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: "u"},
		Spec: spokev1.SpokeWarmupSpec{Source: spokev1.WarmupSource{PVC: "data"}, Paths: spokev1.WarmupPaths{Prefixes: []string{"train"}}}}
	p := WorkerPod(w, "node-1", "vol-handle", 0, WorkerOptions{Image: "img", AgentSocketDir: "/var/lib/spoke/run"})
	if p.Spec.NodeName != "node-1" || *p.Spec.AutomountServiceAccountToken {
		t.Errorf("pinned to %q, token %v", p.Spec.NodeName, *p.Spec.AutomountServiceAccountToken)
	}
	c := p.Spec.Containers[0]
	if c.Args[len(c.Args)-1] != "train" || c.Env[0].Value != "vol-handle" || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("container %+v", c)
	}
	if p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "data" || p.Spec.Volumes[1].HostPath.Path != "/var/lib/spoke/run" {
		t.Errorf("volumes %+v", p.Spec.Volumes)
	}
	if p.OwnerReferences[0].UID != "u" || p.Labels[RoleLabel] != RoleWorker {
		t.Errorf("owner/labels %+v %+v", p.OwnerReferences, p.Labels)
	}
}

func TestWorkerPodCarriesRateAndVerify(t *testing.T) {
	w := &spokev1.SpokeWarmup{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns"},
		Spec: spokev1.SpokeWarmupSpec{Source: spokev1.WarmupSource{PVC: "data"}, RateLimit: "50Mi", Verify: true}}
	rate, msg := RateBytes(w.Spec)
	if rate != 50<<20 || msg != "" {
		t.Fatalf("RateBytes(50Mi) = %d, %q", rate, msg)
	}
	env := map[string]string{}
	for _, e := range WorkerPod(w, "n", "h", rate, WorkerOptions{}).Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["RATE"] != "52428800" || env["VERIFY"] != "1" {
		t.Errorf("env %v", env)
	}
	for in, want := range map[string]int64{"": 0, "1": 1, "200M": 200000000, "1Ti": 1 << 40} {
		if got, msg := RateBytes(spokev1.SpokeWarmupSpec{RateLimit: in}); got != want || msg != "" {
			t.Errorf("RateBytes(%q) = %d, %q; want %d", in, got, msg, want)
		}
	}
	for _, in := range []string{"fast", "0", "-1Mi", "0.5", "2Ti", "1m"} {
		if _, msg := RateBytes(spokev1.SpokeWarmupSpec{RateLimit: in}); !strings.Contains(msg, "spec.rateLimit") {
			t.Errorf("RateBytes(%q): message %q does not name spec.rateLimit", in, msg)
		}
	}
}

func applied(l Line) spokev1.NodeProgress {
	var n spokev1.NodeProgress
	l.Apply(&n)
	return n
}
