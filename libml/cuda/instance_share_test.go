//go:build linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"sluice/libml"
	"sluice/libml/zoo"
)

// A share becomes an SM partition of floor(share x groups) of the
// device's SM groups, at least one; a share of 1 is the whole device;
// bad shares are refused; without green contexts the error says so.
func TestInstanceSetShare(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	g := preemptModel(t, "squeezenet11")
	inst := load(t, b, "m", g, 1).(*Instance)
	defer inst.Close()
	in := zoo.Input(8, inst.InputSize())
	want := infer(t, b, inst, 1, in)
	// the emulator's 8 SMs are 4 groups of 2
	for _, c := range []struct {
		share float64
		sms   int
	}{{0.25, 2}, {0.5, 4}, {0.7, 4}, {0.75, 6}, {0.1, 2}, {0.99, 6}} {
		if err := inst.SetShare(c.share); err != nil {
			t.Fatal(err)
		}
		if got := inst.SMs(); got != c.sms {
			t.Errorf("share %v: %d SMs, want %d", c.share, got, c.sms)
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

// Shares that sum to at most 1 run on SM groups that do not overlap, also
// where some SMs are in no group (the H200 splits 120 of its 132 SMs into
// 15 groups of 8: two halves of ceil(66 / 8) groups each overlapped on
// 3). Here 9 SMs: 4 groups of 2 and one SM outside them.
func TestInstanceSharesSideBySide(t *testing.T) {
	b, _ := newEmuBackendOn(t, newEmuDev(9, true), Options{}, libml.BackendConfig{})
	g, err := zoo.Build("mlp", zoo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, shares := range [][]float64{{0.5, 0.5}, {0.25, 0.25, 0.5}, {0.3, 0.7}, {0.4, 0.35, 0.25}} {
		var insts []*Instance
		for k, share := range shares {
			inst := load(t, b, fmt.Sprint("m", k), g, 1).(*Instance)
			insts = append(insts, inst)
			if err := inst.SetShare(share); err != nil {
				t.Fatal(err)
			}
		}
		if got := b.slots.use; slices.Max(got) > 1 {
			t.Errorf("shares %v: slot use %v, a group in two partitions", shares, got)
		}
		for _, inst := range insts {
			if err := inst.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := b.slots.use; slices.Max(got) != 0 {
		t.Errorf("slot use %v after every instance closed", got)
	}
}
