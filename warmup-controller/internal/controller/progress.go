package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	spokev1 "github.com/spoke-csi/spoke/warmup-controller/api/v1alpha1"
)

// Figures is one `spokectl warmup --json` line.
type Figures struct {
	FilesTotal     int64   `json:"filesTotal"`
	FilesDone      int64   `json:"filesDone"`
	BytesTotal     int64   `json:"bytesTotal"`
	BytesDone      int64   `json:"bytesDone"`
	BytesFromHub   int64   `json:"bytesFromHub"`
	BlocksVerified int64   `json:"blocksVerified"`
	BlocksRepaired int64   `json:"blocksRepaired"`
	FilesChanged   int64   `json:"filesChanged"`
	Done           bool    `json:"done"`
	Error          string  `json:"error"`
	ElapsedSeconds float64 `json:"elapsedSeconds"`
}

// Line is one line of a worker pod's log: "STEP STEPS BD BT FD FT HUB VER REP CHG {json}", STEP
// counting the paths from 1, then the bytes done, bytes total, files done, files total, bytes
// from the hub, blocks verified, blocks repaired and files changed of the paths before STEP,
// then the current path's figures. A worker of an older controller wrote no VER REP CHG.
type Line struct {
	Step, Steps int
	Before      Figures // of the finished paths
	Figures             // of the current path
}

// ParseLine reads a worker's progress line; the error says what is malformed.
func ParseLine(s string) (Line, error) {
	t := strings.TrimSpace(s)
	head, js := t, ""
	if brace := strings.Index(t, " {"); brace >= 0 {
		head, js = t[:brace], t[brace+1:]
	}
	parts := strings.Split(head, " ")
	if len(parts) > 10 {
		parts = parts[:10]
	}
	var n [10]int64
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 0 {
			return Line{}, fmt.Errorf("progress line %q: field %d (%q) is not a count", s, i+1, p)
		}
		n[i] = v
	}
	if js == "" || (len(parts) != 7 && len(parts) != 10) {
		return Line{}, fmt.Errorf("progress line %q: want \"STEP STEPS BD BT FD FT HUB VER REP CHG {json}\"", s)
	}
	l := Line{Step: int(n[0]), Steps: int(n[1])}
	if l.Step < 1 || l.Steps < l.Step {
		return Line{}, fmt.Errorf("progress line %q: step %d of %d", s, l.Step, l.Steps)
	}
	l.Before = Figures{BytesDone: n[2], BytesTotal: n[3], FilesDone: n[4], FilesTotal: n[5], BytesFromHub: n[6],
		BlocksVerified: n[7], BlocksRepaired: n[8], FilesChanged: n[9]}
	if err := json.Unmarshal([]byte(js), &l.Figures); err != nil {
		return Line{}, fmt.Errorf("progress line %q: %v", s, err)
	}
	return l, nil
}

// Percent of the whole node's work: every path weighs the same (their sizes are known only
// once each starts), the current one by its bytes, and whole only once spokectl says done.
func (l Line) Percent() int32 {
	frac := 0.0
	switch {
	case l.Done && l.Error == "":
		frac = 1
	case l.BytesTotal > 0:
		frac = float64(l.BytesDone) / float64(l.BytesTotal)
	}
	if frac > 1 {
		frac = 1
	}
	if !l.Done && frac > 0.999 {
		// Every byte is cached but spokectl is not done: its verify pass (spec.verify) is still
		// reading and repairing. The node is not at 100 % (not ready, no gate lifted) before it is.
		frac = 0.999
	}
	p := (float64(l.Step-1) + frac) / float64(l.Steps) * 100
	return int32(p)
}

// Apply copies the line's figures (all paths so far) into a node's progress, with the rate and
// ETA of the current path.
func (l Line) Apply(n *spokev1.NodeProgress) {
	n.Percent = l.Percent()
	n.BytesDone, n.BytesTotal = l.Before.BytesDone+l.BytesDone, l.Before.BytesTotal+l.BytesTotal
	n.FilesDone, n.FilesTotal = l.Before.FilesDone+l.FilesDone, l.Before.FilesTotal+l.FilesTotal
	n.BytesFromHub = l.Before.BytesFromHub + l.BytesFromHub
	n.BlocksVerified = l.Before.BlocksVerified + l.BlocksVerified
	n.BlocksRepaired = l.Before.BlocksRepaired + l.BlocksRepaired
	n.FilesChanged = l.Before.FilesChanged + l.FilesChanged
	n.BytesPerSecond, n.ETASeconds = 0, 0
	if l.ElapsedSeconds > 0 {
		n.BytesPerSecond = int64(float64(l.BytesDone) / l.ElapsedSeconds)
	}
	if n.BytesPerSecond > 0 && l.BytesTotal > l.BytesDone {
		n.ETASeconds = (l.BytesTotal - l.BytesDone) / n.BytesPerSecond
	}
	if l.Steps > 1 {
		n.Message = fmt.Sprintf("path %d of %d", l.Step, l.Steps)
	}
}

// Buckets of the warmth label: coarse, so that labels change a few times per warm-up.
var Buckets = []int32{0, 25, 50, 75, 90, 100}

// Bucket is the largest bucket at or below percent.
func Bucket(percent int32) int32 {
	b := Buckets[0]
	for _, x := range Buckets {
		if percent >= x {
			b = x
		}
	}
	return b
}

// LabelPrefix of the node labels; the name part is the dataset's hash.
const LabelPrefix = "warm.spoke.csi.dev/"

// DatasetLabelKey names a dataset by its PV's volume handle (the hub, share and directory):
// two PVCs of one dataset share the label.
func DatasetLabelKey(volumeHandle string) string {
	sum := sha256.Sum256([]byte(volumeHandle))
	return LabelPrefix + hex.EncodeToString(sum[:])[:12]
}

// WorkerPodName is stable per warm-up and node, so a restarted controller finds its pods.
func WorkerPodName(warmup, node string) string {
	sum := sha256.Sum256([]byte(node))
	name := warmup
	if len(name) > 45 {
		name = name[:45]
	}
	return strings.TrimRight(name, "-.") + "-warm-" + hex.EncodeToString(sum[:])[:8]
}
