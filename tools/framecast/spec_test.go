package main

import (
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseStreamGood(t *testing.T) {
	tests := []struct {
		in   string
		want streamSpec
	}{
		{"model=1", streamSpec{Name: "m1/be", Model: 1, Class: "be", Rate: 10, Size: 150528, Arrival: "uniform", Loop: "open"}},
		{"model=1,class=rt,rate=20,size=150528,arrival=poisson",
			streamSpec{Name: "m1/rt", Model: 1, Class: "rt", Rate: 20, Size: 150528, Arrival: "poisson", Loop: "open"}},
		{"model=2,arrival=lognormal", streamSpec{Name: "m2/be", Model: 2, Class: "be", Rate: 10, Size: 150528, Arrival: "lognormal", Sigma: 1, Loop: "open"}},
		{"model=2,arrival=lognormal,sigma=0.5,rate=3",
			streamSpec{Name: "m2/be", Model: 2, Class: "be", Rate: 3, Size: 150528, Arrival: "lognormal", Sigma: 0.5, Loop: "open"}},
		{"model=3,trace=t.txt", streamSpec{Name: "m3/be", Model: 3, Class: "be", Size: 150528, Arrival: "trace", Trace: "t.txt", Loop: "open"}},
		{"model=3,arrival=trace,trace=t.txt,class=rt",
			streamSpec{Name: "m3/rt", Model: 3, Class: "rt", Size: 150528, Arrival: "trace", Trace: "t.txt", Loop: "open"}},
		{"model=4,loop=closed", streamSpec{Name: "m4/be", Model: 4, Class: "be", Size: 150528, Loop: "closed", Concurrency: 1}},
		{"model=4,concurrency=8", streamSpec{Name: "m4/be", Model: 4, Class: "be", Size: 150528, Loop: "closed", Concurrency: 8}},
		{"model=5,images=dir", streamSpec{Name: "m5/be", Model: 5, Class: "be", Rate: 10, Size: 150528, Height: 224, Width: 224,
			Images: "dir", Arrival: "uniform", Loop: "open"}},
		{"model=5,images=a.png,hw=32x48,size=4608", streamSpec{Name: "m5/be", Model: 5, Class: "be", Rate: 10, Size: 4608, Height: 32, Width: 48,
			Images: "a.png", Arrival: "uniform", Loop: "open"}},
		{"model=6,hw=2x3", streamSpec{Name: "m6/be", Model: 6, Class: "be", Rate: 10, Size: 18, Height: 2, Width: 3, Arrival: "uniform", Loop: "open"}},
		{"name=cam 7, model=7, deadline=12.5, frames=3", streamSpec{Name: "cam 7", Model: 7, Class: "be", Rate: 10, Size: 150528,
			Arrival: "uniform", Loop: "open", DeadlineMS: 12.5, Frames: 3}},
	}
	for _, tc := range tests {
		got, err := parseStream(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseStreamBad(t *testing.T) {
	tests := []struct{ in, want string }{
		{"class=rt", "model is required"},
		{"model=1,model=2", `key "model" given twice`},
		{"model=1,rate", `"rate" is not key=value`},
		{"model=70000", `model "70000": want an id 0..65535`},
		{"model=1,class=gold", `class "gold": want rt or be`},
		{"model=1,rate=0", `rate "0": want a positive number`},
		{"model=1,rate=-3", `rate "-3"`},
		{"model=1,size=abc", `size "abc": want a positive integer`},
		{"model=1,arrival=burst", `arrival "burst": want uniform, poisson, lognormal or trace`},
		{"model=1,colour=red", `unknown key "colour"`},
		{"model=1,sigma=1", "sigma applies to arrival=lognormal only"},
		{"model=1,arrival=lognormal,sigma=0", `sigma "0"`},
		{"model=1,arrival=trace", "arrival=trace needs trace=FILE"},
		{"model=1,arrival=poisson,trace=x", "trace=FILE needs arrival=trace (it is poisson)"},
		{"model=1,trace=x,rate=5", "rate does not apply to arrival=trace"},
		{"model=1,loop=closed,rate=5", "rate applies to loop=open"},
		{"model=1,concurrency=4,arrival=poisson", "arrival applies to loop=open"},
		{"model=1,loop=open,concurrency=4", "concurrency applies to loop=closed"},
		{"model=1,loop=sideways", `loop "sideways": want open or closed`},
		{"model=1,concurrency=0", `concurrency "0": want 1..65536`},
		{"model=1,hw=224", `hw "224": want HEIGHTxWIDTH`},
		{"model=1,hw=0x5", `hw "0x5": height: want a positive integer`},
		{"model=1,hw=10x10,size=301", "size=301 disagrees with hw=10x10 (10×10×3 = 300 bytes)"},
		{"model=1,images=d,size=100", "size=100 disagrees with hw=224x224"},
		{"model=1,images=", "images: want a file or directory"},
		{"model=1,deadline=0", `deadline "0"`},
		{"model=1,frames=-1", `frames "-1"`},
		{"model=1,name=a|b", `name "a|b"`},
	}
	for _, tc := range tests {
		_, err := parseStream(tc.in)
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.in, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `stream "`+tc.in+`"`) {
			t.Errorf("%q: error %q, want it to quote the stream and say %q", tc.in, err, tc.want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	cfg, quiet, err := parseArgs([]string{"-target", "10.0.0.1:9400", "-duration", "3s", "-timeout", "500ms", "-json", "r.json",
		"-plot", "p.svg", "-metrics", "http://127.0.0.1:9401/metrics", "-quiet", "-flow", "77", "-seed", "9",
		"-stream", "model=1,class=rt", "-stream", "model=1,class=rt,rate=2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !quiet || cfg.Target != "10.0.0.1:9400" || cfg.Duration != 3*time.Second || cfg.Timeout != 500*time.Millisecond ||
		cfg.JSONPath != "r.json" || cfg.PlotPath != "p.svg" || cfg.MetricsURL == "" || cfg.Flow != 77 || cfg.Seed != 9 {
		t.Errorf("config %+v", cfg)
	}
	if len(cfg.Streams) != 2 || cfg.Streams[0].Name != "m1/rt" || cfg.Streams[1].Name != "m1/rt#2" {
		t.Errorf("streams %+v", cfg.Streams)
	}
	if _, _, err = parseArgs([]string{"-version"}, io.Discard); !errors.Is(err, errVersion) {
		t.Errorf("-version: %v", err)
	}
	if cfg, _, err = parseArgs([]string{"-pace", "400MB"}, io.Discard); err != nil || cfg.Pace != 400e6 {
		t.Errorf("-pace 400MB: %v, %v", cfg.Pace, err)
	}
	cfg, _, err = parseArgs(nil, io.Discard)
	if err != nil || cfg.Pace != 0 || len(cfg.Streams) != 1 || cfg.Streams[0].Rate != 20 || cfg.Streams[0].Class != "rt" {
		t.Errorf("default stream: %+v, %v", cfg.Streams, err)
	}
	for args, want := range map[string]string{
		"-duration 0s":                        "-duration 0s",
		"-timeout -1s":                        "-timeout -1s",
		"-frag 0":                             "-frag 0: want 1..65467",
		"-frames 0":                           "-frames 0",
		"-flow 4294967296":                    "-flow 4294967296",
		"-frag 1 -stream model=1,size=100000": "more than 65535: raise -frag",
		"-stream model=1,rate=x":              `rate "x"`,
		"-pace fast":                          `-pace "fast": want bytes per second`,
		"-max-loss 2":                         "-max-loss 2: want a fraction 0..1",
		"-max-errors -0.5":                    "-max-errors -0.5: want a fraction 0..1",
		"stray":                               `unexpected argument "stray"`,
		"-flow 4294967295 -stream model=1 -stream model=2": "flow ids past 4294967295",
	} {
		_, _, err := parseArgs(strings.Fields(args), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", args, err, want)
		}
	}
}

// Every framecast command line in docs/framecast.md parses: its flags and
// stream specs exist and validate (the files they name are read only when
// a run starts).
func TestDocumentedCommandsParse(t *testing.T) {
	b, err := os.ReadFile("../../docs/framecast.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "./bin/framecast ") {
			continue
		}
		start := i + 1
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
		}
		args := strings.Fields(l)[1:]
		if _, _, err := parseArgs(args, io.Discard); err != nil {
			t.Errorf("framecast.md:%d: %s: %v", start, l, err)
		}
		n++
	}
	if n < 3 {
		t.Fatalf("found %d framecast commands in framecast.md, want the 3 examples at least", n)
	}
}
