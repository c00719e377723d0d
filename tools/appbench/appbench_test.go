package main

import (
	"testing"

	"sluice/appliance"
)

// The set-ups' profiles parse, and put the IFs where -backend says: on
// the cpu under the appliance's policy, or on the cuda backend (in the
// -cuda mode) under the policy each IF names.
func TestProfileText(t *testing.T) {
	for _, c := range []struct {
		backend, cuda, policy string
		mixed                 bool
	}{
		{"cpu", "driver", "none", false},
		{"cpu", "driver", "reef", true},
		{"cuda", "driver", "none", true},
		{"cuda", "emu", "reef", true},
		{"cuda", "emu", "split", false},
	} {
		o := options{model: "resnet18", threads: 2, backend: c.backend, cuda: c.cuda}
		p, err := appliance.ParseProfile("appbench", profileText(o, c.policy, c.mixed))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		want := 1
		if c.mixed {
			want = 2
		}
		if len(p.IFs) != want {
			t.Fatalf("%+v: %d IFs, want %d", c, len(p.IFs), want)
		}
		for _, s := range p.IFs {
			if s.Backend != c.backend || s.Policy != c.policy {
				t.Errorf("%+v: IF %s on backend %q under policy %q", c, s.Name, s.Backend, s.Policy)
			}
		}
		if c.backend == "cuda" && p.Appliance.CUDA != c.cuda {
			t.Errorf("%+v: appliance cuda mode %q", c, p.Appliance.CUDA)
		}
	}
}
