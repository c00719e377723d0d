package appliance

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseProfile: whatever text an operator writes, ParseProfile
// accepts it or says what is wrong; it never panics. Seeds: the shipped
// profiles (make fuzz mutates them; go test replays the seeds and
// testdata/fuzz/FuzzParseProfile).
func FuzzParseProfile(f *testing.F) {
	paths, _ := filepath.Glob("../profiles/*.toml")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("[appliance]\nthreads = 2\nmodel_memory_mb = 64\n[[port]]\ndriver = \"udp\"\nlisten = \"127.0.0.1:0\"\n[[if]]\nname = \"a\"\nmodel = \"zoo:mlp\"\nslo_ms = 5\nmax_batch = 4\n")
	f.Fuzz(func(t *testing.T, text string) {
		_, _ = ParseProfile("fuzz.toml", text)
	})
}
