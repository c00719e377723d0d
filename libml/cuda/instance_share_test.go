//go:build linux && cgo

package cuda

import (
	"errors"
	"math"
	"testing"

	"sluice/libml"
	"sluice/libml/zoo"
)

// A share becomes an SM partition of at least share x SMs; a share of 1
// is the whole device; bad shares are refused; without green contexts
// the error says so.
func TestInstanceSetShare(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	g := preemptModel(t, "squeezenet11")
	inst := load(t, b, "m", g, 1).(*Instance)
	defer inst.Close()
	in := zoo.Input(8, inst.InputSize())
	want := infer(t, b, inst, 1, in)
	for _, share := range []float64{0.25, 0.5, 0.7} {
		if err := inst.SetShare(share); err != nil {
			t.Fatal(err)
		}
		min := int(math.Ceil(share * emuSMs))
		if got := inst.SMs(); got < min || got >= emuSMs {
			t.Errorf("share %v: %d SMs, want %d..%d", share, got, min, emuSMs-1)
		}
		closeTo(t, "in a share", infer(t, b, inst, 1, in), want, 0)
	}
	if err := inst.SetShare(1); err != nil || inst.SMs() != emuSMs {
		t.Errorf("share 1: %v, %d SMs", err, inst.SMs())
	}
	for _, bad := range []float64{0, -0.5, 1.5, math.NaN()} {
		if err := inst.SetShare(bad); err == nil {
			t.Errorf("share %v accepted", bad)
		}
	}
	nb, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ni := load(t, nb, "m", g, 1).(*Instance)
	defer ni.Close()
	if err := ni.SetShare(0.5); !errors.Is(err, ErrNoGreen) {
		t.Errorf("SetShare without green contexts: %v", err)
	}
	if err := ni.SetShare(1); err != nil {
		t.Errorf("the whole device without green contexts: %v", err)
	}
}
