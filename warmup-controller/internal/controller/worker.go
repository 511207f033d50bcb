package controller

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

// Labels of the pods the controller watches (its pod cache holds only pods with RoleLabel).
const (
	WarmupLabel = "spoke.csi.dev/warmup"
	RoleLabel   = "spoke.csi.dev/warmup-role"
	RoleWorker  = "worker"
	RoleGated   = "gated"
	// WaitForAnnotation on a pod names the warm-up it waits for (same namespace).
	WaitForAnnotation = "spoke.csi.dev/wait-for"
	// SchedulingGate the webhook adds and the controller removes.
	SchedulingGate = "spoke.csi.dev/warmup"
)

// WorkerOptions: what the chart tells the controller about the node side.
type WorkerOptions struct {
	Image          string // has bash and spokectl (the Spoke image)
	AgentSocketDir string // host directory of the agent's socket (agent.socketHostDir)
}

// workerScript warms each path in turn. Every progress line gets "STEP STEPS" and the sums
// of the finished paths (bytesDone bytesTotal filesDone filesTotal bytesFromHub blocksVerified
// blocksRepaired filesChanged) in front (ParseLine). Paths come as arguments, or from
// LIST_FILE on the volume (mounted at DATA, default /data); none = everything. With SUBDIR
// (spec.source.subDir) the paths and the list file are relative to that directory. RATE (bytes per
// second) and VERIFY (non-empty) go to spokectl as --rate and --verify.
const workerScript = `set -euo pipefail
shopt -s lastpipe
paths=("$@")
sub=${SUBDIR:-}
if [ -n "$LIST_FILE" ]; then mapfile -t paths < <(grep -v '^[[:space:]]*$' "${DATA:-/data}/${sub:+$sub/}$LIST_FILE"); fi
[ ${#paths[@]} -gt 0 ] || paths=(/)
if [ -n "$sub" ]; then for k in "${!paths[@]}"; do paths[k]="$sub/${paths[k]#/}"; done; fi
field() { if [[ $2 =~ \"$1\":([0-9]+) ]]; then echo "${BASH_REMATCH[1]}"; else echo 0; fi; }
n=${#paths[@]}
i=0
opts=()
[ -z "${RATE:-}" ] || opts+=(--rate "$RATE")
[ -z "${VERIFY:-}" ] || opts+=(--verify)
bd=0 bt=0 fd=0 ft=0 hub=0 ver=0 rep=0 chg=0
for p in "${paths[@]}"; do
  i=$((i + 1))
  last=""
  # (Errors through the same pipe: they stay after the last progress line.)
  spokectl --socket /run/spoke/agent.sock warmup --volume "$VOLUME" --json ${opts[@]+"${opts[@]}"} "$p" 2>&1 |
    while IFS= read -r l; do
      case $l in
        "{"*) echo "$i $n $bd $bt $fd $ft $hub $ver $rep $chg $l"; last=$l ;;
        *) echo "$l" ;;
      esac
    done
  bd=$((bd + $(field bytesDone "$last"))) bt=$((bt + $(field bytesTotal "$last")))
  fd=$((fd + $(field filesDone "$last"))) ft=$((ft + $(field filesTotal "$last")))
  hub=$((hub + $(field bytesFromHub "$last")))
  ver=$((ver + $(field blocksVerified "$last"))) rep=$((rep + $(field blocksRepaired "$last")))
  chg=$((chg + $(field filesChanged "$last")))
done
`

// WorkerPod runs `spokectl warmup` for one node: pinned with nodeName, the PVC mounted (it
// keeps the volume staged on the node while it runs), the agent's socket from the host, no
// service-account token (it never calls the API server). `rate`: spec.rateLimit in bytes per
// second (RateBytes), 0 = none.
func WorkerPod(w *spokev1.SpokeWarmup, node, volumeHandle string, rate int64, o WorkerOptions) *corev1.Pod {
	no, yes := false, true
	args := append([]string{"-c", workerScript, "spoke-warmup"}, w.Spec.Paths.Prefixes...)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      WorkerPodName(w.Name, node),
			Namespace: w.Namespace,
			Labels:    map[string]string{WarmupLabel: w.Name, RoleLabel: RoleWorker},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: spokev1.GroupVersion.String(), Kind: "SpokeWarmup",
				Name: w.Name, UID: w.UID, Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			// Wherever the agent runs (its DaemonSet tolerates every taint).
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:                    []corev1.Container{workerContainer(args, volumeHandle, w.Spec, rate, o.Image)},
			Volumes:                       workerVolumes(SourcePVCName(w), o.AgentSocketDir),
			TerminationGracePeriodSeconds: ptrInt64(2),
		},
	}
}

func ptrInt64(v int64) *int64 { return &v }

func workerContainer(args []string, volumeHandle string, spec spokev1.SpokeWarmupSpec, rate int64, image string) corev1.Container {
	no, yes := false, true
	rateEnv, verifyEnv := "", ""
	if rate > 0 {
		rateEnv = strconv.FormatInt(rate, 10)
	}
	if spec.Verify {
		verifyEnv = "1"
	}
	return corev1.Container{
		Name:    "warmup",
		Image:   image,
		Command: []string{"bash"},
		Args:    args,
		Env: []corev1.EnvVar{
			{Name: "VOLUME", Value: volumeHandle},
			{Name: "SUBDIR", Value: spec.Source.SubDir},
			{Name: "LIST_FILE", Value: spec.Paths.ListFile},
			{Name: "RATE", Value: rateEnv},
			{Name: "VERIFY", Value: verifyEnv},
		},
		// Root owns the agent's socket; no capability or privilege is needed beyond that.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptrInt64(0), AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: "/data", ReadOnly: true},
			{Name: "agent-socket", MountPath: "/run/spoke"},
		},
	}
}

func workerVolumes(pvc, socketDir string) []corev1.Volume {
	dir := corev1.HostPathDirectory
	return []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
			ClaimName: pvc, ReadOnly: true,
		}}},
		{Name: "agent-socket", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: socketDir, Type: &dir,
		}}},
	}
}

// MaxRateBytes is the largest spec.rateLimit spokectl takes (1Ti per second).
const MaxRateBytes = int64(1) << 40

// RateBytes is spec.rateLimit in bytes per second (0 when empty); msg names the field when it
// is not a quantity spokectl takes (the schema's pattern refuses most of these first).
func RateBytes(spec spokev1.SpokeWarmupSpec) (int64, string) {
	if spec.RateLimit == "" {
		return 0, ""
	}
	q, err := resource.ParseQuantity(spec.RateLimit)
	if err != nil {
		return 0, fmt.Sprintf("spec.rateLimit: %q is not a quantity (bytes per second, e.g. 50Mi)", spec.RateLimit)
	}
	v, exact := q.AsInt64()
	if !exact || v < 1 || v > MaxRateBytes {
		return 0, fmt.Sprintf("spec.rateLimit: %q must be a whole number of bytes per second from 1 to 1Ti", spec.RateLimit)
	}
	return v, ""
}
