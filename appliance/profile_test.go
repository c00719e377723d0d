package appliance

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sluice/ifmanager"
	"sluice/libml/sched"
)

// The IF spec lists the scheduling policies without linking the
// scheduler: the lists must stay equal.
func TestSpecPoliciesAreTheSchedulers(t *testing.T) {
	var want []string
	for _, p := range sched.Policies() {
		want = append(want, string(p))
	}
	if got := ifmanager.Policies(); got[0] != PolicyNone || !slices.Equal(got[1:], want) {
		t.Fatalf("ifmanager.Policies() = %v, want none then %v", got, want)
	}
}

const profHead = "[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n"

// Every [[if]] error names the file, the line and the key, whichever
// layer finds it: TOML decoding (types, ranges of typed fields) or the
// spec's Validate.
func TestProfileIFErrorsNameLineAndKey(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nmodel_id = 70000\n", "test.toml:7: if[0].model_id: 70000 is out of range for uint16"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nmodel_id = -1\n", "test.toml:7: if[0].model_id: -1 is out of range"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n[[if]] # second\nname=\"b\"\nslo_ms = \"fast\"\n", "test.toml:9: if[1].slo_ms: incompatible types"},
		{"[appliance]\nthreads = \"all\"\n" + profHead, "test.toml:2: appliance.threads: incompatible types"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n[[if]]\nname=\"b\"\nmodel_id=1\nmodel=\"zoo:y\"\nmean = [0.5, 0.5]\nstd = [1]\n",
			"test.toml:12: if[1].std: 1 values, mean has 2"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\ninput_shape = [3, 0]\n", "test.toml:7: if[0].input_shape[1] 0: want >= 1"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nmean = [nan]\n", "test.toml:7: if[0].mean[0] NaN"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nslo_ms = inf\n", "test.toml:7: if[0].slo_ms +Inf"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nshare = nan\n", "test.toml:7: if[0].share NaN"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nmax_batch = 4\nmin_batch = 5\n", "test.toml:8: if[0].min_batch 5"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nqueue_len = 100000000\n", "test.toml:7: if[0].queue_len 100000000"},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nbatching = \"greedy\"\n", `test.toml:7: if[0].batching "greedy"`},
		{profHead + "[[if]]\nname=\"a\"\nmodel=\"resnet18\"\n", `test.toml:6: if[0].model "resnet18"`},
		{profHead + "[[if]]\nname=\"a b\"\nmodel=\"zoo:x\"\n", `test.toml:5: if[0].name "a b": only letters`},
		{profHead + "[[if]]\nmodel=\"zoo:x\"\n", `test.toml:4: if[0].name: must not be empty`},
	} {
		_, err := ParseProfile("test.toml", tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("profile %q:\nerror %v\nwant it to contain %q", tc.text, err, tc.want)
		}
	}
}

// An empty list means the same as an absent one, and the IFs get the
// spec's defaults.
func TestProfileIFDefaults(t *testing.T) {
	p, err := ParseProfile("test.toml", profHead+"[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nmean = []\nstd = []\ninput_shape = []\n"+
		"[[if]]\nname=\"b\"\nmodel_id=1\nmodel=\"zoo:x\"\nauto_share = true\n")
	if err != nil {
		t.Fatal(err)
	}
	want := IFSection{Name: "a", Model: "zoo:x", Backend: "cpu", Class: "be", MaxBatch: 8, MinBatch: 1,
		Batching: "slab", QueueLen: 256, Input: ifmanager.InputF32, Share: 1, Policy: PolicyNone, TimeoutAction: ifmanager.TimeoutReject}
	if !reflect.DeepEqual(p.IFs[0], want) {
		t.Errorf("if[0] = %#v\nwant %#v", p.IFs[0], want)
	}
	if s := p.IFs[1].Share; s != ifmanager.DefaultAutoShare {
		t.Errorf("auto_share IF: share %v, want %v", s, ifmanager.DefaultAutoShare)
	}
}

// The example profiles in docs/profiles.md parse.
func TestDocumentedProfilesParse(t *testing.T) {
	b, err := os.ReadFile("../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, block := range strings.Split(string(b), "```toml\n")[1:] {
		text, _, ok := strings.Cut(block, "```")
		if !ok {
			t.Fatalf("unterminated toml block: %.40q", block)
		}
		n++
		if _, err := ParseProfile(fmt.Sprintf("profiles.md block %d", n), text); err != nil {
			t.Error(err)
		}
	}
	if n == 0 {
		t.Error("no toml blocks in docs/profiles.md")
	}
}

// log_format = "json" gives one JSON object per line; the default is text.
func TestLogFormat(t *testing.T) {
	for _, tc := range []struct{ format, prefix string }{{"", "time="}, {"json", `{"time":`}} {
		prof, err := ParseProfile("p.toml", fmt.Sprintf("[appliance]\nlog_format = %q\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n", tc.format))
		if tc.format == "" {
			prof, err = ParseProfile("p.toml", "[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n")
		}
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		prof.Appliance.NewLogger(&b).Info("hello", "if", "a")
		if !strings.HasPrefix(b.String(), tc.prefix) || !strings.Contains(b.String(), "hello") {
			t.Errorf("log_format %q: %q", tc.format, b.String())
		}
	}
}
