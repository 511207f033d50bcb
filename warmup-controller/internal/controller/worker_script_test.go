package controller

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSpokectl prints two progress lines per path (half, then done); the path "bad" fails as
// spokectl does when the agent goes away.
const fakeSpokectl = `#!/bin/bash
p=${@: -1}
echo "$p" >>"$CALLS"
echo "$*" >>"$CALLS.args"
echo '{"bytesDone":50,"bytesFromHub":40,"bytesTotal":100,"done":false,"elapsedSeconds":1,"error":"","filesDone":1,"filesTotal":2}'
[ "$p" != bad ] || { echo "spokectl: warmup volume $VOLUME: agent unavailable" >&2; exit 1; }
echo '{"blocksRepaired":1,"blocksVerified":3,"bytesDone":100,"bytesFromHub":70,"bytesTotal":100,"done":true,"elapsedSeconds":2,"error":"","filesChanged":0,"filesDone":2,"filesTotal":2}'
`

// runWorkerScript runs workerScript with a fake spokectl; returns stdout+stderr lines, the
// paths spokectl was called with, and the exit error.
func runWorkerScript(t *testing.T, listFile string, args ...string) ([]string, []string, error) {
	t.Helper()
	lines, calls, _, err := runWorkerScriptEnv(t, listFile, nil, args...)
	return lines, calls, err
}

// runWorkerScriptEnv also takes more environment and returns spokectl's argument lines.
func runWorkerScriptEnv(t *testing.T, listFile string, env []string, args ...string) ([]string, []string, []string, error) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "spokectl"), []byte(fakeSpokectl), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{"-c", workerScript, "spoke-warmup"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "VOLUME=vol-1", "LIST_FILE="+listFile,
		"DATA="+dir, "CALLS="+filepath.Join(dir, "calls"), "RATE=", "VERIFY=")
	cmd.Env = append(cmd.Env, env...)
	if listFile != "" {
		if err := os.WriteFile(filepath.Join(dir, listFile), []byte("train\n\n  \nval/part-1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cmd.CombinedOutput()
	calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
	argLines, _ := os.ReadFile(filepath.Join(dir, "calls.args"))
	return strings.Split(strings.TrimSpace(string(out)), "\n"), strings.Fields(string(calls)),
		strings.Split(strings.TrimSpace(string(argLines)), "\n"), err
}

func TestWorkerScriptPassesRateAndVerifyAndSumsTheVerifyCounts(t *testing.T) {
	lines, _, args, err := runWorkerScriptEnv(t, "", []string{"RATE=52428800", "VERIFY=1"}, "train", "val")
	if err != nil {
		t.Fatalf("%v: %v", err, lines)
	}
	for _, a := range args {
		if !strings.Contains(a, "--json --rate 52428800 --verify ") {
			t.Errorf("spokectl called with %q", a)
		}
	}
	last, err := ParseLine(lines[len(lines)-1])
	if err != nil {
		t.Fatal(err)
	}
	if n := applied(last); n.BlocksVerified != 6 || n.BlocksRepaired != 2 || n.FilesChanged != 0 {
		t.Errorf("verify sums over both paths: %+v", n)
	}
	_, _, args, err = runWorkerScriptEnv(t, "", nil, "train")
	if err != nil || strings.Contains(args[0], "--rate") || strings.Contains(args[0], "--verify") {
		t.Errorf("no RATE, no VERIFY: spokectl called with %q (%v)", args[0], err)
	}
}

func TestWorkerScriptSumsFinishedPaths(t *testing.T) {
	lines, calls, err := runWorkerScript(t, "", "train", "val")
	if err != nil {
		t.Fatalf("%v: %v", err, lines)
	}
	if strings.Join(calls, " ") != "train val" || len(lines) != 4 {
		t.Fatalf("calls %v, lines %v", calls, lines)
	}
	last, err := ParseLine(lines[3])
	if err != nil {
		t.Fatal(err)
	}
	if last.Step != 2 || last.Percent() != 100 {
		t.Errorf("last line %+v", last)
	}
	var n = applied(last)
	if n.BytesDone != 200 || n.BytesTotal != 200 || n.FilesDone != 4 || n.BytesFromHub != 140 {
		t.Errorf("sums over both paths: %+v", n)
	}
}

func TestWorkerScriptReadsTheListFileAndDefaultsToAll(t *testing.T) {
	_, calls, err := runWorkerScript(t, "list.txt")
	if err != nil || strings.Join(calls, " ") != "train val/part-1" {
		t.Errorf("list file: calls %v, err %v", calls, err)
	}
	_, calls, err = runWorkerScript(t, "")
	if err != nil || strings.Join(calls, " ") != "/" {
		t.Errorf("no paths: calls %v, err %v", calls, err)
	}
}

func TestWorkerScriptFailsWithSpokectlsMessageLast(t *testing.T) {
	lines, calls, err := runWorkerScript(t, "", "a", "bad", "c")
	if err == nil {
		t.Fatal("the script succeeded though spokectl failed")
	}
	if strings.Join(calls, " ") != "a bad" || !strings.Contains(lines[len(lines)-1], "agent unavailable") {
		t.Errorf("calls %v, last line %q", calls, lines[len(lines)-1])
	}
}

func TestWorkerScriptWarmsPathsUnderTheSourceSubDir(t *testing.T) {
	_, calls, _, err := runWorkerScriptEnv(t, "", []string{"SUBDIR=datasets/a"}, "train", "/val")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(calls, " ") != "datasets/a/train datasets/a/val" {
		t.Errorf("paths under the sub-directory: %v", calls)
	}
	// No paths: the sub-directory itself (spokectl forgives the trailing slash).
	if _, calls, _, err = runWorkerScriptEnv(t, "", []string{"SUBDIR=datasets/a"}); err != nil || strings.Join(calls, " ") != "datasets/a/" {
		t.Errorf("whole sub-directory: %v %v", calls, err)
	}
	// The list file is read in the sub-directory, and its paths are relative to it.
	data := t.TempDir()
	if err := os.MkdirAll(filepath.Join(data, "datasets/a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "datasets/a/list.txt"), []byte("x\ny/z\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, calls, _, err := runWorkerScriptEnv(t, "", []string{"SUBDIR=datasets/a", "LIST_FILE=list.txt", "DATA=" + data})
	if err != nil || strings.Join(calls, " ") != "datasets/a/x datasets/a/y/z" {
		t.Errorf("list file under the sub-directory: %v %v %v", calls, err, lines)
	}
}
