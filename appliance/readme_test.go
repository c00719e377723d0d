package appliance

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/dataplane/dptest"
)

// readmeBlocks returns the fenced sh blocks of README.md's section
// heading, one command per element (comments and blank lines dropped).
func readmeBlocks(t *testing.T, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	in, inBlock := false, false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## "):
			in = l == "## "+heading
		case in && l == "```sh":
			inBlock = true
			blocks = append(blocks, nil)
		case in && inBlock && l == "```":
			inBlock = false
		case in && inBlock:
			cmd := l
			if i := strings.Index(cmd, "  #"); i >= 0 {
				cmd = cmd[:i]
			}
			if cmd = strings.TrimSpace(cmd); cmd != "" {
				blocks[len(blocks)-1] = append(blocks[len(blocks)-1], cmd)
			}
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md has no sh block under %q", heading)
	}
	return blocks
}

// TestReadmeRunsAsWritten runs README.md's "Running the server yourself"
// commands as written, from the repository's root: sluice on the shipped
// default profile, framecast against it, the metrics, then every ifctl
// command. `make build` is replaced by building the three binaries into
// bin/ (what it does after `make deps`). sluice runs in the background,
// and stops on SIGTERM with status 0. It uses the default profile's fixed
// addresses (127.0.0.1:9400, :9401, /tmp/sluice-control.sock).
func TestReadmeRunsAsWritten(t *testing.T) {
	blocks := readmeBlocks(t, "Running the server yourself")
	if len(blocks) != 2 || len(blocks[0]) != 4 || blocks[0][0] != "make build" || !strings.HasPrefix(blocks[0][1], "./bin/sluice ") {
		t.Fatalf("the section's commands changed; update this test: %q", blocks)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct{ name, pkg string }{{"sluice", "./appliance/cmd/sluice"}, {"framecast", "./tools/framecast"}, {"ifctl", "./tools/ifctl"}} {
		goBuild(t, root, b.pkg, filepath.Join(root, "bin", b.name))
	}
	sh := func(line string, env ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// the server, in the background
	cmd := exec.Command("bash", "-c", "exec "+blocks[0][1])
	cmd.Dir = root
	srv := startProc(t, cmd)

	// framecast: every request answered ok, equal frames equal answers
	out, err := sh(blocks[0][2])
	if err != nil || !strings.Contains(out, "| all |") || strings.Contains(out, "nothing answered") {
		t.Fatalf("%s: %v\n%s", blocks[0][2], err, out)
	}
	// the metrics
	if out, err := sh(blocks[0][3]); err != nil || !strings.Contains(out, "sluice_requests_total") {
		t.Fatalf("%s: %v\n%s", blocks[0][3], err, out)
	}

	// ifctl: the export, then each command
	env, ok := strings.CutPrefix(blocks[1][0], "export ")
	if !ok {
		t.Fatalf("the ifctl block starts with %q, not an export", blocks[1][0])
	}
	for _, line := range blocks[1][1:] {
		out, err := sh(line, env)
		t.Logf("%s:\n%s", line, out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.wait(t); err != nil {
		t.Fatalf("sluice after SIGTERM: %v\n%s", err, srv.logs())
	}
}

// TestMakeRunDemo runs the script behind `make run` (tools/demo/run.sh:
// a veth pair in a network namespace of its own, sluice on DPDK with
// profiles/demo.toml under reef, framecast from the namespace) for 3 s:
// it must end with status 0, every request answered, sluice drained, and
// its final counters printed. It needs root.
func TestMakeRunDemo(t *testing.T) {
	dptest.RequireRoot(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct{ name, pkg string }{{"sluice", "./appliance/cmd/sluice"}, {"framecast", "./tools/framecast"}} {
		goBuild(t, root, b.pkg, filepath.Join(root, "bin", b.name))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "tools/demo/run.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DURATION=3s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tools/demo/run.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"| all |", "sluice exited 0", `msg="final counters" port=dpdk0`, "sluice_preemptions_total"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}
