package appliance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/orchestrator"
)

// unreadablePaths makes, in dir, the files a profile or model path must
// not be read from, by name: a device that never ends, a FIFO nobody
// writes, a directory, a file one byte over the profile limit. Each maps
// to the text its error must hold.
func unreadablePaths(t *testing.T, dir string) (paths []string, want map[string]string) {
	t.Helper()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "profiles.d")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", MaxProfileBytes+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{
		"/dev/zero": "profile /dev/zero: a character device, not a regular file",
		fifo:        "profile " + fifo + ": a FIFO, not a regular file",
		sub:         "profile " + sub + ": a directory, not a regular file",
		big:         fmt.Sprintf("profile %s: %d bytes, larger than the 1 MiB limit", big, MaxProfileBytes+1),
	}
	return []string{"/dev/zero", fifo, sub, big}, want
}

// TestReloadRefusesUnreadablePaths: reload-profile with /dev/zero, a FIFO,
// a directory or an oversized file is refused at once with a clear error
// (and a missing file is not_found); status keeps answering, a deploy of
// a model at such a path is refused too, and the appliance stops.
func TestReloadRefusesUnreadablePaths(t *testing.T) {
	model := classifierPath(t)
	dir := t.TempDir()
	text := fmt.Sprintf(controlProfile, filepath.Join(dir, "ctl.sock"), model)
	path := filepath.Join(dir, "p.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	a, stop := startAppliance(t, path, text)
	a.SetProfilePath(path)
	cl := controlClient(t, a)
	ctx := context.Background()
	status := func(when string) {
		t.Helper()
		st, err := cl.Status(ctx, orchestrator.StatusArgs{})
		if err != nil || len(st.IFs) != 1 || st.IFs[0].Name != "cls" || st.IFs[0].State != "serving" {
			t.Fatalf("status %s: %+v, %v", when, st, err)
		}
	}
	status("before")
	paths, want := unreadablePaths(t, dir)
	for _, p := range paths {
		_, err := cl.ReloadProfile(ctx, orchestrator.ReloadArgs{Path: p})
		var oe *orchestrator.Error
		if !errors.As(err, &oe) || oe.Code != orchestrator.CodeInvalidProfile || oe.Message != want[p] {
			t.Errorf("reload %s: %v; want invalid_profile: %s", p, err, want[p])
		}
		status("after reload " + p)
	}
	var oe *orchestrator.Error
	if _, err := cl.ReloadProfile(ctx, orchestrator.ReloadArgs{Path: filepath.Join(dir, "none.toml")}); !errors.As(err, &oe) || oe.Code != orchestrator.CodeNotFound {
		t.Errorf("reload of a missing file: %v", err)
	}
	// A model path is read under the same rules (a size limit of its
	// own): a FIFO or a device does not block the control plane.
	for _, p := range []string{"/dev/zero", filepath.Join(dir, "fifo.toml")} {
		for _, backend := range []string{"cpu", "ort"} {
			_, err := cl.Deploy(ctx, orchestrator.DeployArgs{Name: "bad", ModelID: 9, Model: "onnx:" + p, Backend: backend})
			if !errors.As(err, &oe) || oe.Code != orchestrator.CodeBadRequest || !strings.Contains(oe.Message, p+": a ") ||
				!strings.Contains(oe.Message, "not a regular file") {
				t.Errorf("deploy onnx:%s on %s: %v", p, backend, err)
			}
			status("after deploy onnx:" + p)
		}
	}
	stop() // returns: no command holds the shutdown
}

// TestBinaryUnreadableProfiles runs the real sluice binary: reload-profile
// with /dev/zero, a FIFO, a directory and an oversized file is refused
// with a clear error while status keeps answering; SIGHUP after the
// profile's path has become a FIFO is refused too; SIGTERM then exits 0.
// A profile with a bad IF serves the good one; with -strict, sluice exits
// 1 naming the file, line and key of the bad IF, and so does -check,
// which loads the models without serving.
func TestBinaryUnreadableProfiles(t *testing.T) {
	_, path, text, garbage, _ := isolationSetup(t)
	text = strings.Replace(text, `log_level = "warn"`, `log_level = "info"`, 1) // the test reads the log
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	bin := filepath.Join(t.TempDir(), "sluice")
	goBuild(t, "", "./cmd/sluice", bin)
	wantBad := fmt.Sprintf("profile %s:%d: if[1].model %q: ", path, lineOf(t, text, garbage), "onnx:"+garbage)

	// -strict: the bad IF fails the start.
	cmd := exec.Command(bin, "-strict", "-profile", path, "-stats-interval", "0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "sluice: "+wantBad) {
		t.Fatalf("sluice -strict: %v; want exit status 1 and %q in:\n%s", err, wantBad, out)
	}

	// -check: the same failure, without serving, and the good IF loads
	out, err = exec.Command(bin, "-check", "-profile", path).CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "sluice: "+wantBad) ||
		!strings.Contains(string(out), "1 of 3 IFs load") {
		t.Fatalf("sluice -check: %v; want exit status 1, %q and \"1 of 3 IFs load\" in:\n%s", err, wantBad, out)
	}

	p := startBinary(t, bin, path)
	cl, err := orchestrator.Dial("ipc://"+filepath.Join(dir, "ctl.sock"), orchestrator.ClientConfig{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	status := func(when string) {
		t.Helper()
		st, err := cl.Status(ctx, orchestrator.StatusArgs{})
		if err != nil || len(st.IFs) != 3 {
			t.Fatalf("status %s: %+v, %v", when, st, err)
		}
		for _, s := range st.IFs {
			if s.Name == "cls" && s.State != "serving" || s.Name == "garbage" && (s.State != "failed" || !strings.HasPrefix(s.Error, wantBad)) {
				t.Fatalf("status %s: %+v", when, s)
			}
		}
	}
	status("at start")
	paths, want := unreadablePaths(t, dir)
	for _, q := range paths {
		_, err := cl.ReloadProfile(ctx, orchestrator.ReloadArgs{Path: q})
		var oe *orchestrator.Error
		if !errors.As(err, &oe) || oe.Code != orchestrator.CodeInvalidProfile || oe.Message != want[q] {
			t.Errorf("reload %s: %v; want invalid_profile: %s", q, err, want[q])
		}
		status("after reload " + q)
	}
	// SIGHUP re-reads the start path, now a FIFO.
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "reload rejected")
	if logs := p.logs(); !strings.Contains(logs, "a FIFO, not a regular file") {
		t.Errorf("SIGHUP with a FIFO profile: no FIFO error in the log:\n%s", logs)
	}
	status("after SIGHUP")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t); err != nil {
		t.Fatalf("sluice exited with %v after SIGTERM:\n%s", err, p.logs())
	}
	if logs := p.logs(); !strings.Contains(logs, "sluice drained") {
		t.Fatalf("no drain in the log:\n%s", logs)
	}
}

// sluiceProc is a running sluice binary and its log.
type sluiceProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    strings.Builder
	lines  chan string
	exited chan error
}

// startBinary starts bin on the profile at path (with extra flags) and
// waits until it serves. The process is killed when the test ends, if
// still running.
func startBinary(t *testing.T, bin, path string, extra ...string) *sluiceProc {
	t.Helper()
	args := append([]string{"-profile", path, "-stats-interval", "0"}, extra...)
	return startProc(t, exec.Command(bin, args...))
}

// goBuild builds the Go package pkg, relative to the directory dir (""
// for this package's), into the binary out, with the extra go build
// flags given.
func goBuild(t *testing.T, dir, pkg, out string, flags ...string) {
	t.Helper()
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, pkg)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// startProc starts cmd, a sluice process, reads its log and waits until
// it serves. The process is killed when the test ends, if still running.
func startProc(t *testing.T, cmd *exec.Cmd) *sluiceProc {
	t.Helper()
	p := &sluiceProc{cmd: cmd, lines: make(chan string, 1024), exited: make(chan error, 1)}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	p.waitLog(t, "sluice serving")
	return p
}

func (p *sluiceProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLog waits for a log line containing s (a hang guard of 2 minutes).
func (p *sluiceProc) waitLog(t *testing.T, s string) {
	t.Helper()
	guard := time.After(2 * time.Minute)
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, s) {
				return
			}
		case <-guard:
			t.Fatalf("no %q in the log:\n%s", s, p.logs())
		}
	}
}

// wait waits for the process to exit (a hang guard of 2 minutes).
func (p *sluiceProc) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.exited:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("sluice did not exit:\n%s", p.logs())
		return nil
	}
}
