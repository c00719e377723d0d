package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	old := version
	defer func() { version = old }()
	version = "v9.9.9-test"
	if got, want := String("sluice"), "sluice v9.9.9-test ("+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+")"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	version = ""
	if v := Version(); v == "" || strings.ContainsAny(v, " \n") {
		t.Fatalf("unstamped Version = %q", v)
	}
}
