package orchestrator_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/orchestrator"
)

func TestKeyFile(t *testing.T) {
	k := keyPair(t)
	path := filepath.Join(t.TempDir(), "client.key")
	if err := orchestrator.WriteKeyFile(path, k); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	got, err := orchestrator.ReadKeyFile(path)
	if err != nil || got != k {
		t.Fatalf("ReadKeyFile = %+v, %v", got, err)
	}
	pub, err := orchestrator.ParseKeyFile([]byte("public-key = " + k.Public + "\n"))
	if err != nil || pub.Public != k.Public || pub.Secret != "" {
		t.Errorf("public-only = %+v, %v", pub, err)
	}
	other := keyPair(t)
	for _, tc := range []struct{ text, msg string }{
		{"", "no public-key"},
		{"public-key", "want NAME = VALUE"},
		{"color = blue", "unknown name"},
		{"public-key = abc", "want 40 Z85"},
		{"public-key = " + other.Public + "\nsecret-key = " + k.Secret, "does not belong"},
	} {
		if _, err := orchestrator.ParseKeyFile([]byte(tc.text)); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: err = %v, want %q", tc.text, err, tc.msg)
		}
	}
}
