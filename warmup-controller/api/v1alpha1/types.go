// Package v1alpha1 is the SpokeWarmup API (group spoke.csi.dev): which dataset to warm, on
// which nodes, when, and how far each node got. The OpenAPI schema with its validation lives in
// charts/spoke/crds/spoke.csi.dev_spokewarmups.yaml; keep the two in step.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phases of a warm-up.
const (
	PhasePending = "Pending" // nodes not chosen yet, or the source PVC not bound
	PhaseRunning = "Running"
	PhaseReady   = "Ready" // every chosen node holds at least readyPercent
	PhaseFailed  = "Failed"
)

// Schedule modes.
const (
	ScheduleOnce = "Once"
	ScheduleCron = "Cron"
)

// ConditionReady is the condition type gated pods wait for.
const ConditionReady = "Ready"

// SpokeWarmupSpec is what to warm, where and when.
type SpokeWarmupSpec struct {
	Source   WarmupSource `json:"source"`
	Paths    WarmupPaths  `json:"paths,omitempty"`
	Nodes    NodeChoice   `json:"nodes"`
	Schedule Schedule     `json:"schedule,omitempty"`
	// ReadyPercent: a node counts as ready once this share of the bytes is cached (1-100).
	ReadyPercent int32 `json:"readyPercent,omitempty"`
	// RateLimit: bytes per second each node's warm-up may fetch from the hub (or its peers), a
	// quantity such as "50Mi"; empty = no limit. Readers on the node are never held by it.
	RateLimit string `json:"rateLimit,omitempty"`
	// Verify: after the warm-up, each node re-reads what is cached (every block against its
	// stored checksum, every file's version against the hub's) and fetches again what is bad.
	Verify bool `json:"verify,omitempty"`
}

// WarmupSource names the volume: a PVC of the warm-up's namespace, or a StorageClass of
// dataset volumes and a directory in it (the controller claims a volume of the class for the
// warm-up: every claim of a dataset class names the same volume, so a job's PVC of that class
// reads what the warm-up cached). Exactly one of PVC and StorageClass.
type WarmupSource struct {
	PVC          string `json:"pvc,omitempty"`
	StorageClass string `json:"storageClass,omitempty"`
	// SubDir: a directory in the class's volume; paths and the list file are relative to it.
	SubDir string `json:"subDir,omitempty"`
}

// WarmupPaths: empty is the whole volume; Prefixes are paths in the volume; ListFile is a file
// on the volume with one path per line.
type WarmupPaths struct {
	Prefixes []string `json:"prefixes,omitempty"`
	ListFile string   `json:"listFile,omitempty"`
}

// NodeChoice: exactly one of the three.
type NodeChoice struct {
	NodeSelector map[string]string     `json:"nodeSelector,omitempty"`
	PodSelector  *metav1.LabelSelector `json:"podSelector,omitempty"`
	Count        *int32                `json:"count,omitempty"`
}

// Schedule: Once, or again at every Cron time after the last completion.
type Schedule struct {
	Mode string `json:"mode,omitempty"`
	Cron string `json:"cron,omitempty"`
}

// NodeProgress is one node's warm-up, from its worker pod's last progress line.
type NodeProgress struct {
	Node           string `json:"node"`
	Phase          string `json:"phase"`
	Percent        int32  `json:"percent"`
	BytesDone      int64  `json:"bytesDone"`
	BytesTotal     int64  `json:"bytesTotal"`
	FilesDone      int64  `json:"filesDone"`
	FilesTotal     int64  `json:"filesTotal"`
	BytesFromHub   int64  `json:"bytesFromHub"`
	BytesPerSecond int64  `json:"bytesPerSecond"`
	ETASeconds     int64  `json:"etaSeconds,omitempty"`
	Attempts       int32  `json:"attempts,omitempty"`
	// The verify pass (spec.verify): cached blocks read back and good, blocks fetched again
	// (bad checksum, missing, or of an older version of their file), files changed on the hub.
	BlocksVerified int64  `json:"blocksVerified,omitempty"`
	BlocksRepaired int64  `json:"blocksRepaired,omitempty"`
	FilesChanged   int64  `json:"filesChanged,omitempty"`
	Message        string `json:"message,omitempty"`
}

// SpokeWarmupStatus is what the controller observed.
type SpokeWarmupStatus struct {
	Phase              string             `json:"phase,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Round              int32              `json:"round,omitempty"`
	NodesReady         string             `json:"nodesReady,omitempty"`
	Percent            int32              `json:"percent"`
	DatasetLabel       string             `json:"datasetLabel,omitempty"`
	Nodes              []NodeProgress     `json:"nodes,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	LastCompletion     *metav1.Time       `json:"lastCompletion,omitempty"`
}

// SpokeWarmup warms a Spoke volume's cache on chosen nodes.
type SpokeWarmup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SpokeWarmupSpec   `json:"spec"`
	Status            SpokeWarmupStatus `json:"status,omitempty"`
}

// SpokeWarmupList is a list of SpokeWarmup.
type SpokeWarmupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SpokeWarmup `json:"items"`
}
