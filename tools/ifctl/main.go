// Command ifctl steers a running sluice appliance over its ZeroMQ control
// endpoint: deploy, remove, resize, swap and re-batch inference functions
// (IFs), reload the profile, show status and drain.
//
// Usage:
//
//	ifctl [global flags] <command> [flags]
//
// Global flags (they may also follow the command):
//
//	-endpoint URL      control endpoint (default $SLUICE_CONTROL, else ipc:///run/sluice/control.sock)
//	-json              print the raw JSON reply instead of text
//	-timeout D         how long to wait without hearing from the appliance (default 5s); a command
//	                   it is still working on sends a progress notice every 2s, and ifctl
//	                   waits for its reply as long as they come
//	-server-key KEY    the server's CURVE public key, or -server-key-file FILE ($SLUICE_SERVER_KEY)
//	-key-file FILE     this client's CURVE key pair, from `ifctl keygen` ($SLUICE_CLIENT_KEY_FILE)
//	-insecure          allow tcp:// without CURVE
//	-id ID             request id (default: generated); with -client-id, a retry is answered from the server's reply cache
//	-client-id NAME    ZeroMQ routing identity (default: generated)
//
// Commands: status, deploy, remove, resize, swap, set-batch,
// reload-profile, drain, keygen. `ifctl help COMMAND` lists a command's
// flags; docs/commands.md describes them all.
//
// Exit status: 0 success, 1 the command failed (the error's code and
// message are printed) or the appliance could not be reached, 2 usage
// error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"sluice/appliance/buildinfo"
	"sluice/orchestrator"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// globals are the flags every command accepts.
type globals struct {
	endpoint      string
	json          bool
	timeout       time.Duration
	serverKey     string
	serverKeyFile string
	keyFile       string
	insecure      bool
	id            string
	clientID      string
}

// register adds the global flags to fs; defaults come from the
// environment.
func (g *globals) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&g.endpoint, "endpoint", orDefault(getenv("SLUICE_CONTROL"), defaultEndpoint(fileExists)), "control endpoint (ipc://PATH or tcp://HOST:PORT)")
	fs.BoolVar(&g.json, "json", false, "print the raw JSON reply")
	fs.DurationVar(&g.timeout, "timeout", 5*time.Second, "how long to wait without hearing from the appliance (a command it works on sends progress notices: ifctl waits for as long as they come)")
	fs.StringVar(&g.serverKey, "server-key", getenv("SLUICE_SERVER_KEY"), "server's CURVE public key (Z85)")
	fs.StringVar(&g.serverKeyFile, "server-key-file", "", "file with the server's CURVE public key")
	fs.StringVar(&g.keyFile, "key-file", getenv("SLUICE_CLIENT_KEY_FILE"), "this client's CURVE key pair file (ifctl keygen)")
	fs.BoolVar(&g.insecure, "insecure", false, "allow tcp:// without CURVE")
	fs.StringVar(&g.id, "id", "", "request id (default: generated)")
	fs.StringVar(&g.clientID, "client-id", "", "ZeroMQ routing identity (default: generated)")
}

// knownEndpoints are the control sockets of the shipped profiles, in the
// order ifctl tries them: the appliance's default (no control key), then
// profiles/default.toml's and profiles/demo.toml's.
var knownEndpoints = []string{orchestrator.DefaultEndpoint, "ipc:///tmp/sluice-control.sock", "ipc:///run/sluice/demo-control.sock"}

// defaultEndpoint is the endpoint ifctl talks to without -endpoint or
// $SLUICE_CONTROL: the first of knownEndpoints whose socket exists, else
// the appliance's default.
func defaultEndpoint(exists func(path string) bool) string {
	for _, e := range knownEndpoints {
		if exists(strings.TrimPrefix(e, "ipc://")) {
			return e
		}
	}
	return orchestrator.DefaultEndpoint
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// usageError is a command-line mistake (exit 2).
type usageError struct{ msg string }

// Error returns the message.
func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// env is what a command runs with.
type env struct {
	g      *globals
	stdout io.Writer
	stderr io.Writer
}

const usageText = `usage: ifctl [global flags] <command> [flags]

commands:
  status         [-name IF]                         show the appliance and its IFs
  deploy         -name IF -model M -model-id N ...  start an IF
  remove         -name IF                           stop an IF
  resize         -name IF (-share F | -units N)     change an IF's resource share
  swap           -name IF [-model M] [-share F] [-max-batch N]
                                                    replace an IF through a shadow swap
  set-batch      -name IF -max N [-min N]           change an IF's batch bounds
  reload-profile [-path FILE]                       re-read the profile and apply it
  drain          [-wait D]                          stop admitting requests, finish queued ones
  resume                                            admit requests again after drain
  plan                                              the cpu units' placement, predicted vs observed
  keygen         [-o FILE]                          make a CURVE key pair

global flags (before or after the command):
  -version  -endpoint URL  -json  -timeout D  -server-key KEY  -server-key-file FILE
  -key-file FILE  -insecure  -id ID  -client-id NAME

'ifctl help COMMAND' shows a command's flags. Exit status: 0 ok, 1 command
failed, 2 usage error.
`

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	g := &globals{}
	fs := flag.NewFlagSet("ifctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.register(fs, getenv)
	version := fs.Bool("version", false, "print ifctl's version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			return exitOK
		}
		fmt.Fprintf(stderr, "ifctl: %v\n\n%s", err, usageText)
		return exitUsage
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.String("ifctl"))
		return exitOK
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "ifctl: no command\n\n%s", usageText)
		return exitUsage
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		return help(rest, stdout, stderr, getenv)
	}
	cmd, ok := commands()[name]
	if !ok {
		fmt.Fprintf(stderr, "ifctl: unknown command %q\n\n%s", name, usageText)
		return exitUsage
	}
	sub := flag.NewFlagSet("ifctl "+name, flag.ContinueOnError)
	sub.SetOutput(io.Discard)
	// Global flags may follow the command; the values parsed so far are
	// the defaults.
	saved := *g
	g.register(sub, getenv)
	*g = saved
	sub.VisitAll(func(f *flag.Flag) { f.DefValue = f.Value.String() })
	build := cmd.flags(sub)
	if err := sub.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(stdout, name, cmd, sub)
			return exitOK
		}
		fmt.Fprintf(stderr, "ifctl %s: %v\n(see 'ifctl help %s')\n", name, err, name)
		return exitUsage
	}
	if sub.NArg() > 0 {
		fmt.Fprintf(stderr, "ifctl %s: unexpected argument %q\n(see 'ifctl help %s')\n", name, sub.Arg(0), name)
		return exitUsage
	}
	set := map[string]bool{}
	sub.Visit(func(f *flag.Flag) { set[f.Name] = true })
	e := &env{g: g, stdout: stdout, stderr: stderr}
	err := build(e, set)
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "ifctl %s: %s\n(see 'ifctl help %s')\n", name, ue.msg, name)
		return exitUsage
	}
	var oe *orchestrator.Error
	if errors.As(err, &oe) {
		fmt.Fprintf(stderr, "ifctl %s: %s: %s\n", name, oe.Code, oe.Message)
		return exitError
	}
	fmt.Fprintf(stderr, "ifctl %s: %v\n", name, err)
	return exitError
}

func help(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "ifctl help: unknown command %q\n\n%s", args[0], usageText)
		return exitUsage
	}
	sub := flag.NewFlagSet("ifctl "+args[0], flag.ContinueOnError)
	cmd.flags(sub)
	printCommandHelp(stdout, args[0], cmd, sub)
	return exitOK
}

func printCommandHelp(w io.Writer, name string, cmd command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: ifctl %s %s\n\n%s\n\nflags:\n", name, cmd.synopsis, cmd.doc)
	fs.VisitAll(func(f *flag.Flag) {
		if isGlobalFlag(f.Name) {
			return
		}
		typ, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  -%s %s\n    \t%s", f.Name, typ, usage)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func isGlobalFlag(name string) bool {
	switch name {
	case "endpoint", "json", "timeout", "server-key", "server-key-file", "key-file", "insecure", "id", "client-id":
		return true
	}
	return false
}

// dial connects to the appliance described by the global flags; a call
// gives up after hearing nothing from it for timeout.
func (e *env) dial(timeout time.Duration) (*orchestrator.Client, error) {
	g := e.g
	cfg := orchestrator.ClientConfig{Insecure: g.insecure, Timeout: timeout, Identity: g.clientID}
	cfg.CurveServerKey = g.serverKey
	if g.serverKeyFile != "" {
		if g.serverKey != "" {
			return nil, usagef("give -server-key or -server-key-file, not both")
		}
		k, err := orchestrator.ReadKeyFile(g.serverKeyFile)
		if err != nil {
			return nil, err
		}
		cfg.CurveServerKey = k.Public
	}
	if g.keyFile != "" {
		if cfg.CurveServerKey == "" {
			return nil, usagef("-key-file needs -server-key or -server-key-file")
		}
		k, err := orchestrator.ReadKeyFile(g.keyFile)
		if err != nil {
			return nil, err
		}
		if k.Secret == "" {
			return nil, fmt.Errorf("key file %s has no secret-key", g.keyFile)
		}
		cfg.CurvePublicKey, cfg.CurveSecretKey = k.Public, k.Secret
	}
	if path, ok := strings.CutPrefix(g.endpoint, "ipc://"); ok && !strings.HasPrefix(path, "@") {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("no control socket at %s (is sluice running? set -endpoint or SLUICE_CONTROL)", path)
		}
	}
	c, err := orchestrator.Dial(g.endpoint, cfg)
	if err != nil {
		if strings.Contains(err.Error(), "unless Insecure") {
			return nil, usagef("%v (use -server-key and -key-file, or -insecure)", err)
		}
		return nil, err
	}
	return c, nil
}

// call sends one command and returns the reply: printed raw with -json,
// decoded into data otherwise. An error reply is returned as
// *orchestrator.Error. The call waits as long as the appliance works on
// the command (it sends a progress notice every 2s) and gives up after
// -timeout without hearing from it; wait extends that for commands that
// take long on purpose (drain), in case the appliance sends no notices.
func (e *env) call(cmd string, args, data any, wait time.Duration) error {
	c, err := e.dial(max(e.g.timeout, wait))
	if err != nil {
		return err
	}
	defer c.Close()
	req, err := orchestrator.NewRequest(e.g.id, cmd, args)
	if err != nil {
		return err
	}
	rep, raw, err := c.Do(context.Background(), req)
	if err != nil {
		return err
	}
	if rep.Running && rep.Error != nil {
		// Do stopped waiting after a progress notice: the command may
		// still finish on the appliance.
		if e.g.json {
			fmt.Fprintf(e.stdout, "%s\n", raw)
		}
		return &orchestrator.Error{Code: rep.Error.Code, Message: fmt.Sprintf("%s (ifctl stopped waiting: nothing heard for %s; a retry with the same -id and -client-id gets its result)",
			rep.Error.Message, max(e.g.timeout, wait))}
	}
	if e.g.json {
		fmt.Fprintf(e.stdout, "%s\n", raw)
	}
	return rep.Decode(data)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
