package orchestrator

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// Every request shown in docs/commands.md is valid: it parses, names a
// command, and its args decode and validate.
func TestDocumentedRequestsAreValid(t *testing.T) {
	f, err := os.Open("../docs/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmds := commandTable()
	n := 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(text, "{") || !strings.Contains(text, `"cmd"`) {
			continue
		}
		n++
		req, e := parseRequest([]byte(text), DefaultMaxRequestBytes)
		if e != nil {
			t.Errorf("commands.md:%d: %s: %v", line, text, e)
			continue
		}
		cmd, ok := cmds[req.Cmd]
		if !ok {
			t.Errorf("commands.md:%d: unknown command %q", line, req.Cmd)
			continue
		}
		if _, e := cmd.decode(req.Args); e != nil {
			t.Errorf("commands.md:%d: %s: %v", line, text, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < len(Commands()) {
		t.Errorf("found %d requests in commands.md, want at least one per command (%d)", n, len(Commands()))
	}
}
