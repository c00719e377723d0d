package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/appliance/buildinfo"
	"sluice/orchestrator"
	"sluice/orchestrator/orchtest"
)

var seed = orchestrator.IFStatus{Name: "cls", ModelID: 1, Model: "zoo:mlp", Backend: "cpu", Class: "be",
	SLOMS: 20, MaxBatch: 8, QueueLen: 256, Queued: 3, Share: 0.3, State: "serving", Served: 1200, P99MS: 7.25, Bottleneck: "compute"}

// server runs a control server for fake until the test ends.
func server(t *testing.T, cfg orchestrator.ServerConfig, fake *orchtest.Fake) *orchestrator.Server {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = "ipc://" + filepath.Join(t.TempDir(), "c.sock")
	}
	s, err := orchestrator.NewServer(cfg, fake, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

// ifctl runs the command line in-process.
func ifctl(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb, func(k string) string { return env[k] })
	return code, out.String(), errb.String()
}

// A resize whose share the max-min division did not give says so.
func TestResizeLine(t *testing.T) {
	for _, tc := range []struct {
		st   orchestrator.IFStatus
		want string
	}{
		{orchestrator.IFStatus{Name: "a", Share: 0.5, Demand: 0.5, Units: 1}, "resized a: share 0.50 (1 units)"},
		{orchestrator.IFStatus{Name: "a", Share: 1, Demand: 0.5, Units: 2}, "resized a: asked for share 0.50, runs on 1.00 (2 units): shares are divided max-min fairly"},
		{orchestrator.IFStatus{Name: "a", Share: 0.25}, "resized a: share 0.25"},
	} {
		if got := resizeLine(tc.st); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%+v: %q, want it to start with %q", tc.st, got, tc.want)
		}
	}
}

// A reload's [appliance] and [[port]] changes are reported as not applied.
func TestPrintReloadRestart(t *testing.T) {
	var b strings.Builder
	printReload(&b, orchestrator.ReloadResult{Path: "/p.toml", Unchanged: []string{"a"}, RestartNeeded: []string{"appliance.threads", "port[0].listen"}})
	want := "reloaded /p.toml: 0 added, 0 removed, 0 changed, 1 unchanged\n  not applied, they take effect at the next start: appliance.threads, port[0].listen\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

// Without -endpoint or $SLUICE_CONTROL, ifctl talks to the first shipped
// profile's socket that exists.
func TestDefaultEndpoint(t *testing.T) {
	for _, tc := range []struct {
		have []string
		want string
	}{
		{nil, "ipc:///run/sluice/control.sock"},
		{[]string{"/tmp/sluice-control.sock"}, "ipc:///tmp/sluice-control.sock"},
		{[]string{"/run/sluice/demo-control.sock"}, "ipc:///run/sluice/demo-control.sock"},
		{[]string{"/run/sluice/demo-control.sock", "/run/sluice/control.sock"}, "ipc:///run/sluice/control.sock"},
	} {
		got := defaultEndpoint(func(p string) bool { return slices.Contains(tc.have, p) })
		if got != tc.want {
			t.Errorf("sockets %v: %s, want %s", tc.have, got, tc.want)
		}
	}
}

// -version prints ifctl's build and needs no appliance.
func TestVersion(t *testing.T) {
	code, out, errs := ifctl(t, nil, "-version")
	if code != exitOK || out != buildinfo.String("ifctl")+"\n" || errs != "" {
		t.Fatalf("ifctl -version: %d %q %q", code, out, errs)
	}
}

func TestHumanOutput(t *testing.T) {
	fake := orchtest.New(seed)
	srv := server(t, orchestrator.ServerConfig{}, fake)
	env := map[string]string{"SLUICE_CONTROL": srv.Endpoint()}

	code, out, errs := ifctl(t, env, "status")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	wantStatus := `sluice fake: serving, up 13s, 1 IFs

NAME  ID  MODEL    BACKEND  CLASS  SLO   BATCH  QUEUE  SHARE  STATE    SERVED  FAILED  OVERLOADED  P99     BOTTLENECK
cls   1   zoo:mlp  cpu      be     20ms  8      3/256  30%    serving  1200    0       0           7.25ms  compute
`
	if out != wantStatus {
		t.Errorf("status output:\n%s\nwant:\n%s", out, wantStatus)
	}

	code, out, errs = ifctl(t, env, "deploy", "-name", "det", "-model", "zoo:resnet18", "-model-id", "3",
		"-class", "rt", "-slo-ms", "25", "-backend", "ort", "-max-batch", "16", "-queue-len", "64",
		"-input", "u8-hwc", "-mean", "0.485,0.456,0.406", "-std", "0.229,0.224,0.225", "-input-shape", "3,224,224", "-share", "0.4", "-policy", "none")
	if code != 0 || !strings.HasPrefix(out, "deployed det\nNAME ") || !strings.Contains(out, "det   3   zoo:resnet18") {
		t.Fatalf("deploy: %d %q %s", code, out, errs)
	}
	wantDeploy := orchestrator.DeployArgs{Name: "det", ModelID: 3, Model: "zoo:resnet18", Backend: "ort", Class: "rt",
		SLOMS: 25, MaxBatch: 16, QueueLen: 64, Input: "u8-hwc", Mean: []float32{0.485, 0.456, 0.406},
		Std: []float32{0.229, 0.224, 0.225}, InputShape: []int64{3, 224, 224}, Share: 0.4, Policy: "none"}
	if got := fake.Calls()[1].Args; !reflect.DeepEqual(got, wantDeploy) {
		t.Errorf("deploy args:\n got %+v\nwant %+v", got, wantDeploy)
	}

	steps := []struct {
		args []string
		want string
		call orchtest.Call
	}{
		{[]string{"resize", "-name", "det", "-share", "0.5"}, "resized det: share 0.50\n",
			orchtest.Call{Cmd: "resize", Args: orchestrator.ResizeArgs{Name: "det", Share: 0.5}}},
		{[]string{"resize", "-name", "det", "-units", "12"}, "12 units",
			orchtest.Call{Cmd: "resize", Args: orchestrator.ResizeArgs{Name: "det", Units: 12}}},
		{[]string{"swap", "-name", "det"}, "swapped det (prepared in 1.5ms, idle gap 42µs)\n",
			orchtest.Call{Cmd: "swap", Args: orchestrator.SwapArgs{Name: "det"}}},
		{[]string{"swap", "-name", "det", "-model", "zoo:resnet34", "-share", "0.2", "-max-batch", "4"}, "zoo:resnet34",
			orchtest.Call{Cmd: "swap", Args: orchestrator.SwapArgs{Name: "det", Model: "zoo:resnet34", Share: 0.2, MaxBatch: 4}}},
		{[]string{"set-batch", "-name", "det", "-max", "8", "-min", "2"}, "2-8",
			orchtest.Call{Cmd: "set-batch", Args: orchestrator.SetBatchArgs{Name: "det", MaxBatch: 8, MinBatch: 2}}},
		{[]string{"reload-profile", "-path", "/etc/p.toml"}, "reloaded /etc/p.toml: 0 added, 0 removed, 0 changed, 2 unchanged\n",
			orchtest.Call{Cmd: "reload-profile", Args: orchestrator.ReloadArgs{Path: "/etc/p.toml"}}},
		{[]string{"status", "-name", "det"}, "sluice fake: serving",
			orchtest.Call{Cmd: "status", Args: orchestrator.StatusArgs{Name: "det"}}},
		{[]string{"remove", "-name", "det"}, "removed det\n",
			orchtest.Call{Cmd: "remove", Args: orchestrator.RemoveArgs{Name: "det"}}},
		{[]string{"drain", "-wait", "2s"}, "drained in 500µs\n",
			orchtest.Call{Cmd: "drain", Args: orchestrator.DrainArgs{TimeoutMS: 2000}}},
		{[]string{"drain"}, "drained in 500µs\n",
			orchtest.Call{Cmd: "drain", Args: orchestrator.DrainArgs{TimeoutMS: 30000}}},
		{[]string{"resume"}, "resumed: admitting requests again\n",
			orchtest.Call{Cmd: "resume", Args: orchestrator.ResumeArgs{}}},
		{[]string{"resume"}, "not draining: nothing to resume\n",
			orchtest.Call{Cmd: "resume", Args: orchestrator.ResumeArgs{}}},
	}
	for _, s := range steps {
		n := fake.CallCount()
		code, out, errs := ifctl(t, env, s.args...)
		if code != 0 || !strings.Contains(out, s.want) {
			t.Errorf("%v: exit %d, stdout %q (want %q), stderr %q", s.args, code, out, s.want, errs)
			continue
		}
		calls := fake.Calls()
		if len(calls) != n+1 || !reflect.DeepEqual(calls[n], s.call) {
			t.Errorf("%v: handler calls %+v, want %+v", s.args, calls[n:], s.call)
		}
	}

	// A relative profile path is made absolute for an ipc endpoint.
	dir := t.TempDir()
	t.Chdir(dir)
	if code, _, errs := ifctl(t, env, "reload-profile", "-path", "p.toml"); code != 0 {
		t.Fatal(errs)
	}
	calls := fake.Calls()
	if got := calls[len(calls)-1].Args.(orchestrator.ReloadArgs).Path; got != filepath.Join(dir, "p.toml") {
		t.Errorf("reload path = %q", got)
	}
}

func TestJSONOutput(t *testing.T) {
	fake := orchtest.New(seed)
	srv := server(t, orchestrator.ServerConfig{}, fake)
	env := map[string]string{"SLUICE_CONTROL": srv.Endpoint()}

	// -json before or after the command.
	for _, args := range [][]string{{"--json", "status"}, {"status", "-json"}} {
		code, out, errs := ifctl(t, env, args...)
		if code != 0 {
			t.Fatalf("%v: %d %s", args, code, errs)
		}
		var rep struct {
			ID   string                   `json:"id"`
			OK   bool                     `json:"ok"`
			Data orchestrator.StatusReply `json:"data"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.OK || rep.ID == "" ||
			len(rep.Data.IFs) != 1 || !reflect.DeepEqual(rep.Data.IFs[0], seed) {
			t.Errorf("%v: %q (%v)", args, out, err)
		}
	}
	code, out, errs := ifctl(t, env, "-json", "-id", "my-id", "remove", "-name", "nope")
	if code != 1 {
		t.Errorf("failing command exit %d", code)
	}
	if want := `{"id":"my-id","ok":false,"error":{"code":"not_found","message":"no IF named \"nope\""}}` + "\n"; out != want {
		t.Errorf("error reply %q, want %q", out, want)
	}
	if !strings.Contains(errs, "not_found") {
		t.Errorf("stderr %q", errs)
	}
}

func TestErrorsAndUsage(t *testing.T) {
	fake := orchtest.New(seed)
	srv := server(t, orchestrator.ServerConfig{}, fake)
	env := map[string]string{"SLUICE_CONTROL": srv.Endpoint()}
	cases := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"remove", "-name", "nope"}, 1, `ifctl remove: not_found: no IF named "nope"`},
		{[]string{"deploy", "-name", "cls", "-model", "zoo:m", "-model-id", "9"}, 1, "conflict: IF \"cls\" exists"},
		{[]string{"reload-profile", "-path", "/bad.toml"}, 1, "invalid_profile"},
		{[]string{"set-batch", "-name", "cls", "-max", "4", "-min", "9"}, 1, "bad_request: args.min_batch 9: above max_batch 4"},
		{[]string{}, 2, "no command"},
		{[]string{"explode"}, 2, `unknown command "explode"`},
		{[]string{"deploy", "-name", "x", "-model-id", "3"}, 2, "-model is required"},
		{[]string{"deploy", "-name", "x", "-model", "zoo:m", "-model-id", "70000"}, 2, "out of range"},
		{[]string{"deploy", "-name", "x", "-model", "zoo:m", "-model-id", "3", "-mean", "a,b"}, 2, "not a number"},
		{[]string{"resize", "-name", "cls"}, 2, "exactly one of -share and -units"},
		{[]string{"resize", "-name", "cls", "-share", "0.2", "-units", "3"}, 2, "exactly one"},
		{[]string{"set-batch", "-name", "cls"}, 2, "-max is required"},
		{[]string{"remove"}, 2, "-name is required"},
		{[]string{"status", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"status", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"-bogus", "status"}, 2, "flag provided but not defined"},
		{[]string{"drain", "-wait", "11m"}, 2, "out of range"},
		{[]string{"help", "explode"}, 2, "unknown command"},
		{[]string{"-endpoint", "tcp://127.0.0.1:1", "status"}, 2, "tcp needs CURVE"},
		{[]string{"-key-file", "/nonexistent", "status"}, 2, "-key-file needs -server-key"},
	}
	for _, tc := range cases {
		n := fake.CallCount()
		code, _, errs := ifctl(t, env, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errs, tc.code, tc.stderr)
		}
		if tc.code == 2 && fake.CallCount() != n {
			t.Errorf("%v: usage error reached the handler", tc.args)
		}
	}
	code, _, errs := ifctl(t, map[string]string{"SLUICE_CONTROL": "ipc://" + t.TempDir() + "/none.sock"}, "status")
	if code != 1 || !strings.Contains(errs, "is sluice running?") {
		t.Errorf("no socket: %d %q", code, errs)
	}
	for _, args := range [][]string{{"-h"}, {"help"}, {"help", "deploy"}, {"deploy", "-h"}} {
		code, out, _ := ifctl(t, env, args...)
		if code != 0 || !strings.Contains(out, "usage: ifctl") {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
}

// TestRetryWithSameID: with -id and -client-id, a repeated command is
// answered from the server's cache, not run twice.
func TestRetryWithSameID(t *testing.T) {
	fake := orchtest.New(seed)
	srv := server(t, orchestrator.ServerConfig{}, fake)
	env := map[string]string{"SLUICE_CONTROL": srv.Endpoint()}
	args := []string{"-json", "-id", "deploy-1", "-client-id", "ops-script", "deploy", "-name", "n", "-model", "zoo:m", "-model-id", "5"}
	_, out1, _ := ifctl(t, env, args...)
	code, out2, errs := ifctl(t, env, args...)
	if code != 0 || out1 != out2 || !strings.Contains(out1, `"ok":true`) {
		t.Fatalf("retry: %d %q vs %q (%s)", code, out1, out2, errs)
	}
	if n := fake.CallCount(); n != 1 {
		t.Errorf("handler called %d times", n)
	}
}

// TestCurveKeygen: keys made by `ifctl keygen` work against a CURVE
// server; other keys are refused.
func TestCurveKeygen(t *testing.T) {
	dir := t.TempDir()
	serverFile, clientFile, strangerFile := filepath.Join(dir, "server.key"), filepath.Join(dir, "client.key"), filepath.Join(dir, "stranger.key")
	for _, f := range []string{serverFile, clientFile, strangerFile} {
		if code, out, errs := ifctl(t, nil, "keygen", "-o", f); code != 0 || !strings.Contains(out, "public-key = ") {
			t.Fatalf("keygen: %d %q %q", code, out, errs)
		}
	}
	code, out, _ := ifctl(t, nil, "-json", "keygen")
	var kj map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &kj) != nil || len(kj["public_key"]) != 40 || len(kj["secret_key"]) != 40 {
		t.Errorf("keygen -json: %q", out)
	}
	sk, _ := orchestrator.ReadKeyFile(serverFile)
	ck, _ := orchestrator.ReadKeyFile(clientFile)
	fake := orchtest.New(seed)
	srv := server(t, orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", CurveServerSecretKey: sk.Secret,
		AllowedClientKeys: []string{ck.Public}}, fake)
	env := map[string]string{"SLUICE_CONTROL": srv.Endpoint(), "SLUICE_SERVER_KEY": sk.Public}
	if code, out, errs := ifctl(t, env, "-key-file", clientFile, "status"); code != 0 || !strings.Contains(out, "cls") {
		t.Errorf("allowed key: %d %q %q", code, out, errs)
	}
	env = map[string]string{"SLUICE_CONTROL": srv.Endpoint(), "SLUICE_CLIENT_KEY_FILE": strangerFile}
	code, _, errs := ifctl(t, env, "-server-key-file", serverFile, "-timeout", "3s", "drain")
	if code != 1 || !strings.Contains(errs, "client key not allowed") {
		t.Errorf("stranger key: %d %q", code, errs)
	}
	if fake.Draining() || fake.CallCount() != 1 {
		t.Errorf("refused client reached the handler: %+v", fake.Calls())
	}
}

// TestBinary builds ifctl and checks the process's exit codes and output.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "ifctl")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fake := orchtest.New(seed)
	srv := server(t, orchestrator.ServerConfig{}, fake)
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"status"}, 0, "NAME"},
		{[]string{"--json", "status"}, 0, `"ok":true`},
		{[]string{"remove", "-name", "nope"}, 1, "not_found"},
		{[]string{"resize"}, 2, "-name is required"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(os.Environ(), "SLUICE_CONTROL="+srv.Endpoint())
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != tc.code || !strings.Contains(string(out), tc.out) {
			t.Errorf("ifctl %v: exit %d, output %q; want %d, %q", tc.args, cmd.ProcessState.ExitCode(), out, tc.code, tc.out)
		}
	}
}

// TestFailedIFs: status lists an IF that failed to load with its error;
// a reload with failed IFs prints them and exits 1, also with -json.
func TestFailedIFs(t *testing.T) {
	failed := orchestrator.IFStatus{Name: "det", ModelID: 3, Model: "onnx:/m/det.onnx", Backend: "cpu", Class: "be",
		MaxBatch: 8, QueueLen: 256, Share: 1, State: "failed",
		Error: `profile p.toml:14: if[1].model "onnx:/m/det.onnx": /m/det.onnx: no such file or directory`}
	fake := orchtest.New(seed, failed)
	srv := server(t, orchestrator.ServerConfig{}, fake)
	env := map[string]string{"SLUICE_CONTROL": srv.Endpoint()}
	code, out, errs := ifctl(t, env, "status")
	if code != 0 || !strings.Contains(out, "det   3   onnx:/m/det.onnx") || !strings.Contains(out, "  failed  ") ||
		!strings.HasSuffix(out, "\ndet failed: "+failed.Error+"\n") {
		t.Errorf("status: %d %q %q", code, out, errs)
	}

	fake.SetReloadFailures(orchestrator.IFFailure{Name: "det", Error: failed.Error})
	code, out, errs = ifctl(t, env, "reload-profile", "-path", "/etc/p.toml")
	if code != 1 || !strings.HasPrefix(out, "reloaded /etc/p.toml: 0 added, 0 removed, 0 changed, 2 unchanged, 1 failed\n") ||
		!strings.Contains(out, "  failed: det: "+failed.Error+"\n") ||
		errs != "ifctl reload-profile: 1 IFs failed to load (the rest of the profile is applied): det\n" {
		t.Errorf("reload with a failed IF: %d %q %q", code, out, errs)
	}
	code, out, _ = ifctl(t, env, "-json", "reload-profile", "-path", "/etc/p.toml")
	if code != 1 || !strings.Contains(out, `"failed":[{"name":"det"`) {
		t.Errorf("reload -json with a failed IF: %d %q", code, out)
	}
}

// TestWaitsWhileServerWorks: ifctl waits for a command that runs longer
// than -timeout while the server sends progress notices (50 per
// -timeout: only a stall of a second could fail this).
func TestWaitsWhileServerWorks(t *testing.T) {
	fake := orchtest.New(seed)
	srv := server(t, orchestrator.ServerConfig{ProgressInterval: 20 * time.Millisecond}, fake)
	env := map[string]string{"SLUICE_CONTROL": srv.Endpoint()}
	fake.SetHook(orchestrator.CmdDeploy, func(context.Context) error {
		time.Sleep(2500 * time.Millisecond) // a model that compiles for 2.5 -timeouts
		return nil
	})
	code, out, errs := ifctl(t, env, "-timeout", "1s", "deploy", "-name", "det", "-model", "zoo:resnet50", "-model-id", "3")
	if code != 0 || !strings.HasPrefix(out, "deployed det\n") {
		t.Errorf("deploy: %d %q %q", code, out, errs)
	}
}

// Every `$ ifctl ...` line of docs/commands.md runs against a fake
// appliance that serves "det": it exits as the page shows (the number a
// following `echo $?` prints, else 0) and, where the page shows the first
// line of the output or of the error, prints it (outputs with measured
// values, such as times, are compared up to their first digit). keygen
// lines write into a temporary directory; the tcp:// line needs an
// appliance and is only parsed.
func TestDocumentedCommandsRun(t *testing.T) {
	b, err := os.ReadFile("../../docs/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	det := orchestrator.IFStatus{Name: "det", ModelID: 3, Model: "zoo:resnet18", Backend: "cpu", Class: "rt",
		SLOMS: 25, MaxBatch: 8, QueueLen: 256, Share: 0.4, State: "serving"}
	home := t.TempDir()
	lines := strings.Split(string(b), "\n")
	n := 0
	for i, l := range lines {
		cmdline, ok := strings.CutPrefix(l, "$ ifctl ")
		if !ok {
			continue
		}
		if c := strings.Index(cmdline, "  #"); c >= 0 {
			cmdline = cmdline[:c]
		}
		cmdline, echo := strings.CutSuffix(strings.TrimSpace(cmdline), "; echo $?")
		args := strings.Fields(cmdline)
		for k, a := range args {
			// keygen's paths, into the test's directory
			if strings.HasPrefix(a, "/etc/sluice/") || strings.HasPrefix(a, "~/") {
				args[k] = filepath.Join(home, filepath.Base(a))
			}
		}
		if slices.Contains(args, "-endpoint") {
			continue // tcp:// with CURVE keys: an appliance of its own
		}
		// what the page shows: the output up to the next command or the
		// block's end
		var shown []string
		for _, o := range lines[i+1:] {
			if strings.HasPrefix(o, "$ ") || strings.HasPrefix(o, "```") {
				break
			}
			shown = append(shown, o)
		}
		wantCode := 0
		if echo && len(shown) > 0 {
			fmt.Sscan(shown[len(shown)-1], &wantCode)
			shown = shown[:len(shown)-1]
		}
		// a fresh appliance per command: "det" serves, except for the
		// deploy that makes it
		fake := orchtest.New(det)
		if args[0] == "deploy" {
			fake = orchtest.New()
		}
		env := map[string]string{"SLUICE_CONTROL": server(t, orchestrator.ServerConfig{}, fake).Endpoint()}
		code, out, errs := ifctl(t, env, args...)
		n++
		switch {
		case echo && code != wantCode:
			t.Errorf("commands.md:%d: ifctl %s: exit %d, the page shows %d\n%s%s", i+1, cmdline, code, wantCode, out, errs)
			continue
		case !echo && code == exitUsage:
			t.Errorf("commands.md:%d: ifctl %s: a usage error\n%s", i+1, cmdline, errs)
			continue
		}
		if len(shown) == 0 {
			continue
		}
		got := strings.SplitN(out+errs, "\n", 2)[0]
		want := shown[0]
		switch {
		case strings.HasPrefix(want, "wrote "): // a path of the writer's machine
			want, got = "wrote", strings.Fields(got)[0]
		case strings.HasPrefix(want, "sluice"): // the appliance's version and uptime
			want, got = "sluice", strings.TrimRight(strings.Fields(got)[0], ":")
		}
		if d := strings.IndexAny(want, "0123456789"); d >= 0 && !strings.HasPrefix(want, "{") {
			want, got = want[:d], got[:min(d, len(got))]
		}
		if got != want {
			t.Errorf("commands.md:%d: ifctl %s: first line %q, the page shows %q", i+1, cmdline, got, want)
		}
	}
	if n < 8 {
		t.Fatalf("ran %d commands of commands.md, want its examples (at least 8)", n)
	}
}

// With the global stage's unit groups, the plan table says how many and
// puts each IF's group after its units.
func TestPrintPlanGroups(t *testing.T) {
	g0, g1 := 0, 1
	var b strings.Builder
	printPlan(&b, orchestrator.PlanReply{Placement: "inss", Units: 4, Devices: 2, IntervalMS: 1000, IFs: []orchestrator.PlanIF{
		{Name: "busy", Units: 2, Share: 0.5, Device: &g0}, {Name: "idle", Units: 1, Share: 0.25, Device: &g1}, {Name: "new", Units: 1, Share: 0.25}}})
	out := b.String()
	for _, want := range []string{"placement inss on 4 cpu units in 2 groups, every 1000 ms, 3 IFs", "busy  -        2@0", "idle  -        1@1", "new   -        1@-"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	b.Reset()
	printPlan(&b, orchestrator.PlanReply{Placement: "inss", Units: 4, Devices: 2, IntervalMS: 1000, RoundS: 0.4, Planner: "learned"})
	if want := "placement inss on 4 cpu units in 2 groups, every 1000 ms, last round 0.4 s ago (learned), 0 IFs"; !strings.Contains(b.String(), want) {
		t.Errorf("no %q in\n%s", want, b.String())
	}
}

// The status table's STATE column counts a stateful stream's flows and a
// pipeline stage's hand-overs.
func TestPrintIFsStreamsAndStages(t *testing.T) {
	three := 3
	var b strings.Builder
	printIFs(&b, []orchestrator.IFStatus{
		{Name: "kws", Model: "zoo:kws", Backend: "cpu", Class: "be", MaxBatch: 8, QueueLen: 256, State: "serving", Flows: &three, Served: 9},
		{Name: "front", Model: "onnx:/m/f.onnx", Backend: "cpu", Class: "be", MaxBatch: 8, QueueLen: 256, State: "serving", Next: "kws", Forwarded: 12},
	})
	for _, want := range []string{"serving (3 flows)", "serving (12 to kws)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}
