package appliance

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sluice/dataplane/wire"
)

// TestSecondSIGTERMExitsBinary runs the real sluice binary with a drain
// that cannot finish soon: a request whose second fragment never comes
// stays in reassembly for a minute, and the drain timeout is two. The
// first SIGTERM starts the drain; a second one makes sluice exit at once,
// with status 1, without the drain having finished, and removes its pid
// file. (The binary is stamped with a version first, which -version
// prints.)
func TestSecondSIGTERMExitsBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	// stamped as the Makefile stamps it: -version prints the stamp
	goBuild(t, "", "./cmd/sluice", bin, "-ldflags", "-X sluice/appliance/buildinfo.version=v0.0.0-sigterm-test")
	if out, err := exec.Command(bin, "-version").Output(); err != nil || !strings.HasPrefix(string(out), "sluice v0.0.0-sigterm-test (go") {
		t.Fatalf("sluice -version: %q, %v", out, err)
	}
	port := freeUDPPort(t)
	prof := filepath.Join(dir, "p.toml")
	if err := os.WriteFile(prof, []byte(fmt.Sprintf(`
[appliance]
log_level = "info"
threads = 1
metrics = "off"
control = "off"
reassembly_timeout_ms = 60000
drain_timeout_ms = 120000
[[port]]
driver = "udp"
listen = "127.0.0.1:%d"
[[if]]
name = "sq"
model_id = 3
model = "zoo:squeezenet11"
max_batch = 1
`, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "sluice.pid")
	p := startBinary(t, bin, prof, "-pid-file", pidFile)
	if b, err := os.ReadFile(pidFile); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(p.cmd.Process.Pid) {
		t.Fatalf("pid file: %q, %v; want %d", b, err, p.cmd.Process.Pid)
	}
	// a second sluice on the same pid file refuses to start
	if out, err := exec.Command(bin, "-profile", prof, "-pid-file", pidFile).CombinedOutput(); err == nil || !strings.Contains(string(out), "is running") {
		t.Fatalf("a second sluice on the pid file: %v\n%s", err, out)
	}
	// the first of a request's two fragments: it keeps the port's drain
	// waiting until the reassembly timeout, a minute away
	ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 3, Flow: 61, Request: 1}, make([]byte, 3000), 1500)
	if err != nil || len(ds) != 2 {
		t.Fatalf("datagrams: %d, %v", len(ds), err)
	}
	cl := newClient(t, 61)
	if err := cl.SendRaw(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)), ds[0]); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "signal: draining")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	werr := p.wait(t)
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("sluice after a second SIGTERM: %v, want exit status 1:\n%s", werr, p.logs())
	}
	logs := p.logs()
	if !strings.Contains(logs, "second signal: exiting at once") || strings.Contains(logs, "sluice drained") {
		t.Fatalf("want the second signal's exit, before the drain finished:\n%s", logs)
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Fatalf("pid file left after the exit: %v", err)
	}
}
