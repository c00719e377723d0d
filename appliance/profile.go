package appliance

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"sluice/ifmanager"
	"sluice/libml/sched"
)

// Profile is a parsed appliance profile (TOML).
type Profile struct {
	Appliance ApplianceSection `toml:"appliance"`
	Ports     []PortSection    `toml:"port"`
	IFs       []IFSection      `toml:"if"`
}

// ApplianceSection holds process-wide settings.
type ApplianceSection struct {
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// Threads is the CPU backend's worker units (0: all cores).
	Threads int `toml:"threads"`
	// EAL is the DPDK EAL argument list (without the program name); empty
	// means the container-safe defaults.
	EAL []string `toml:"eal"`
	// ReassemblyTimeoutMS expires incomplete requests.
	ReassemblyTimeoutMS int `toml:"reassembly_timeout_ms"`
	// MaxRequestBytes caps a request's size.
	MaxRequestBytes int `toml:"max_request_bytes"`
	// MaxInflight caps requests in reassembly or queued, per port.
	MaxInflight int `toml:"max_inflight"`
	// Metrics is the HTTP address of /metrics, /healthz and /readyz; "off"
	// disables it.
	Metrics string `toml:"metrics"`
	// Control is the ZeroMQ control endpoint (ipc:// or tcp://); "off"
	// disables it.
	Control string `toml:"control"`
	// ControlCurveSecretKey and ControlClientKeys turn on CURVE for a tcp://
	// control endpoint (Z85 keys; see `ifctl keygen`).
	ControlCurveSecretKey string   `toml:"control_curve_secret_key"`
	ControlClientKeys     []string `toml:"control_client_keys"`
	// ShareIntervalMS is how often self-tuning shares are recomputed.
	ShareIntervalMS int `toml:"share_interval_ms"`
	// Policy is the scheduling policy of the cpu IFs that do not name
	// their own: "none" (default: each IF runs on its share of the units)
	// or one of libml/sched's: reef, seq, conc, srpt, split.
	Policy string `toml:"policy"`
}

// PortSection is one port.
type PortSection struct {
	Name string `toml:"name"`
	// Driver is "dpdk" or "udp".
	Driver string `toml:"driver"`
	// Listen is the udp driver's address ("0.0.0.0:9400").
	Listen string `toml:"listen"`
	// IP and UDPPort are the dpdk driver's address.
	IP      string `toml:"ip"`
	UDPPort int    `toml:"udp_port"`
	// Vdev is the DPDK virtual device devargs.
	Vdev string `toml:"vdev"`
	// PoolSize is the DPDK mbuf count or udp buffer count.
	PoolSize int `toml:"pool_size"`
	// FragSize is the response fragment size (MTU-bound).
	FragSize int `toml:"frag_size"`
	// Spin is how many empty polls a dpdk port's loop makes before it
	// sleeps between polls; 0 picks it from the units' placement (see
	// spinFor).
	Spin int `toml:"spin"`
}

// IFSection is one inference function.
type IFSection struct {
	Name    string `toml:"name"`
	ModelID int    `toml:"model_id"`
	// Model is "zoo:NAME" or "onnx:PATH".
	Model string `toml:"model"`
	// Backend is "cpu" or "ort".
	Backend  string    `toml:"backend"`
	Class    string    `toml:"class"`
	SLOMS    float64   `toml:"slo_ms"`
	MaxBatch int       `toml:"max_batch"`
	QueueLen int       `toml:"queue_len"`
	Input    string    `toml:"input"`
	Mean     []float32 `toml:"mean"`
	Std      []float32 `toml:"std"`
	// InputShape fixes the per-request input shape of ONNX models whose
	// input dims are dynamic.
	InputShape []int64 `toml:"input_shape"`
	// MinBatch bounds SLAB from below.
	MinBatch int `toml:"min_batch"`
	// Batching is "slab" (default), "aimd" or "fixed".
	Batching string `toml:"batching"`
	// Share is the IF's initial resource share (0..1], its knee point when
	// profiled; 0 means 0.3 with auto_share, else the whole machine.
	Share float64 `toml:"share"`
	// AutoShare turns on GSLICE's self-tuning share for this IF.
	AutoShare bool `toml:"auto_share"`
	// Policy is the scheduling policy the IF runs under: "none" or a
	// libml/sched policy (cpu backend only). Empty: appliance.policy for
	// cpu IFs, "none" for the others.
	Policy string `toml:"policy"`
}

// LoadProfile reads and validates a profile. Errors name the file and,
// where TOML can tell, the line and key.
func LoadProfile(path string) (*Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return ParseProfile(path, string(data))
}

// ParseProfile parses a profile's text; name is used in errors.
func ParseProfile(name, text string) (*Profile, error) {
	var p Profile
	md, err := toml.Decode(text, &p)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("profile %s:%d: %s", name, pe.Position.Line, pe.Message)
		}
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		sort.Strings(keys)
		where := name
		if line := keyLine(text, und[0]); line > 0 {
			where = fmt.Sprintf("%s:%d", name, line)
		}
		return nil, fmt.Errorf("profile %s: unknown keys: %s", where, strings.Join(keys, ", "))
	}
	if err := p.validate(); err != nil {
		where := name
		if m := errKey.FindStringSubmatch(err.Error()); m != nil {
			idx := -1
			if m[2] != "" {
				idx, _ = strconv.Atoi(m[2])
			}
			if line := findLine(text, m[1], idx, m[3]); line > 0 {
				where = fmt.Sprintf("%s:%d", name, line)
			}
		}
		return nil, fmt.Errorf("profile %s: %w", where, err)
	}
	return &p, nil
}

// errKey matches the key path validation errors start with:
// "appliance.log_level ...", "if[2].class ...", "port[0].vdev ...".
var errKey = regexp.MustCompile(`^(appliance|port|if)(?:\[(\d+)\])?\.([a-z_]+)`)

// keyLine finds the line of an undecoded key such as appliance.bogus or
// if.batchsize (arrays of tables are not indexed in TOML key paths: the
// first match wins).
func keyLine(text string, k toml.Key) int {
	if len(k) < 2 {
		return findLine(text, "", -1, k[len(k)-1])
	}
	return findLine(text, k[0], -1, k[len(k)-1])
}

// findLine returns the 1-based line of key inside table (the index-th
// [[table]] when index >= 0, the first table of that name otherwise), or
// the table header's line when the key is not written there, or 0.
func findLine(text, table string, index int, key string) int {
	lines := strings.Split(text, "\n")
	inTable := table == ""
	seen := -1
	header := 0
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			name := strings.Trim(t, "[] \t")
			if c := strings.IndexByte(name, '#'); c >= 0 {
				name = strings.TrimSpace(strings.Trim(name[:c], "[] \t"))
			}
			if name == table {
				seen++
				inTable = index < 0 || seen == index
				if inTable {
					header = i + 1
				}
			} else {
				if inTable && table != "" && header > 0 {
					return header
				}
				inTable = false
			}
			continue
		}
		if inTable {
			if k, _, ok := strings.Cut(t, "="); ok && strings.TrimSpace(k) == key {
				return i + 1
			}
		}
	}
	return header
}

func (p *Profile) validate() error {
	a := &p.Appliance
	switch a.LogLevel {
	case "":
		a.LogLevel = "info"
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("appliance.log_level %q: want debug, info, warn or error", a.LogLevel)
	}
	if a.ReassemblyTimeoutMS == 0 {
		a.ReassemblyTimeoutMS = 100
	}
	if a.ReassemblyTimeoutMS < 0 {
		return fmt.Errorf("appliance.reassembly_timeout_ms %d: must be positive", a.ReassemblyTimeoutMS)
	}
	if a.MaxRequestBytes == 0 {
		a.MaxRequestBytes = 16 << 20
	}
	if a.MaxInflight == 0 {
		a.MaxInflight = 1024
	}
	if a.Metrics == "" {
		a.Metrics = "127.0.0.1:9401"
	}
	if a.Control == "" {
		a.Control = "ipc:///run/sluice/control.sock"
	}
	if a.Control != "off" && !strings.HasPrefix(a.Control, "ipc://") && !strings.HasPrefix(a.Control, "tcp://") {
		return fmt.Errorf("appliance.control %q: want ipc://PATH, tcp://HOST:PORT or \"off\"", a.Control)
	}
	if a.ShareIntervalMS == 0 {
		a.ShareIntervalMS = 500
	}
	if a.ShareIntervalMS < 10 {
		return fmt.Errorf("appliance.share_interval_ms %d: at least 10", a.ShareIntervalMS)
	}
	switch a.Policy {
	case "":
		a.Policy = PolicyNone
	case PolicyNone:
	default:
		if err := checkPolicy(a.Policy); err != nil {
			return fmt.Errorf("appliance.policy %w", err)
		}
	}
	if a.Metrics != "off" {
		if _, err := netip.ParseAddrPort(a.Metrics); err != nil {
			return fmt.Errorf("appliance.metrics %q: want host:port or \"off\": %w", a.Metrics, err)
		}
	}
	if len(p.Ports) == 0 {
		return errors.New("no [[port]]: at least one is needed")
	}
	names := map[string]bool{}
	for i := range p.Ports {
		pt := &p.Ports[i]
		where := fmt.Sprintf("port[%d]", i)
		if pt.Name == "" {
			pt.Name = fmt.Sprintf("port%d", i)
		}
		if names[pt.Name] {
			return fmt.Errorf("%s.name %q: duplicate", where, pt.Name)
		}
		names[pt.Name] = true
		if pt.FragSize == 0 {
			pt.FragSize = 1432
		}
		if pt.Spin < 0 {
			return fmt.Errorf("%s.spin %d: must not be negative", where, pt.Spin)
		}
		switch pt.Driver {
		case "udp":
			if _, err := netip.ParseAddrPort(pt.Listen); err != nil {
				return fmt.Errorf("%s.listen %q: %w", where, pt.Listen, err)
			}
		case "dpdk":
			if _, err := netip.ParseAddr(pt.IP); err != nil {
				return fmt.Errorf("%s.ip %q: %w", where, pt.IP, err)
			}
			if pt.UDPPort == 0 {
				pt.UDPPort = 9400
			}
			if pt.UDPPort < 1 || pt.UDPPort > 65535 {
				return fmt.Errorf("%s.udp_port %d: out of range", where, pt.UDPPort)
			}
			if pt.Vdev == "" {
				return fmt.Errorf("%s.vdev: required for the dpdk driver", where)
			}
		default:
			return fmt.Errorf("%s.driver %q: want \"dpdk\" or \"udp\"", where, pt.Driver)
		}
	}
	if len(p.IFs) == 0 {
		return errors.New("no [[if]]: at least one inference function is needed")
	}
	ids := map[int]string{}
	ifNames := map[string]bool{}
	for i := range p.IFs {
		f := &p.IFs[i]
		f.inheritPolicy(a.Policy)
		if err := f.validate(fmt.Sprintf("if[%d]", i)); err != nil {
			return err
		}
		if ifNames[f.Name] {
			return fmt.Errorf("if[%d].name %q: duplicate", i, f.Name)
		}
		ifNames[f.Name] = true
		if other, ok := ids[f.ModelID]; ok {
			return fmt.Errorf("if[%d].model_id %d: already served by %q", i, f.ModelID, other)
		}
		ids[f.ModelID] = f.Name
	}
	return nil
}

// validate checks one [[if]] table (also used for deploy commands) and
// fills its defaults; where names it in errors.
func (f *IFSection) validate(where string) error {
	if f.Name == "" {
		return fmt.Errorf("%s.name: required", where)
	}
	if f.ModelID < 0 || f.ModelID > 65535 {
		return fmt.Errorf("%s.model_id %d: out of range 0..65535", where, f.ModelID)
	}
	if !strings.HasPrefix(f.Model, "zoo:") && !strings.HasPrefix(f.Model, "onnx:") {
		return fmt.Errorf("%s.model %q: want \"zoo:NAME\" or \"onnx:PATH\"", where, f.Model)
	}
	switch f.Backend {
	case "":
		f.Backend = "cpu"
	case "cpu", "ort", "cuda":
	default:
		return fmt.Errorf("%s.backend %q: want \"cpu\", \"cuda\" or \"ort\"", where, f.Backend)
	}
	switch f.Policy {
	case "":
		f.Policy = PolicyNone
	case PolicyNone:
	default:
		if err := checkPolicy(f.Policy); err != nil {
			return fmt.Errorf("%s.policy %w", where, err)
		}
		if f.Backend != "cpu" {
			return fmt.Errorf("%s.policy %q: scheduling policies run on the cpu backend, not %q (set policy = \"none\")", where, f.Policy, f.Backend)
		}
		// The scheduler hands units to jobs by class and policy: an IF
		// has no share of its own.
		if f.Share != 0 || f.AutoShare {
			return fmt.Errorf("%s.share: IFs under policy %q share the units through the scheduler; remove share and auto_share or set policy = \"none\"", where, f.Policy)
		}
	}
	switch f.Class {
	case "", "be":
		f.Class = "be"
	case "rt":
	default:
		return fmt.Errorf("%s.class %q: want \"rt\" or \"be\"", where, f.Class)
	}
	if f.SLOMS < 0 {
		return fmt.Errorf("%s.slo_ms %v: must not be negative", where, f.SLOMS)
	}
	if f.MaxBatch == 0 {
		f.MaxBatch = 8
	}
	if f.MaxBatch < 1 || f.MaxBatch > 1024 {
		return fmt.Errorf("%s.max_batch %d: out of range 1..1024", where, f.MaxBatch)
	}
	if f.MinBatch == 0 {
		f.MinBatch = 1
	}
	if f.MinBatch < 1 || f.MinBatch > f.MaxBatch {
		return fmt.Errorf("%s.min_batch %d: must be 1..max_batch (%d)", where, f.MinBatch, f.MaxBatch)
	}
	switch f.Batching {
	case "":
		f.Batching = "slab"
	case "slab", "aimd", "fixed":
	default:
		return fmt.Errorf("%s.batching %q: want slab, aimd or fixed", where, f.Batching)
	}
	if f.Share < 0 || f.Share > 1 {
		return fmt.Errorf("%s.share %v: must be in (0, 1]", where, f.Share)
	}
	if f.Share == 0 && f.Policy == PolicyNone {
		f.Share = 1
		if f.AutoShare {
			f.Share = 0.3
		}
	}
	if f.QueueLen == 0 {
		f.QueueLen = 256
	}
	if f.QueueLen < 1 {
		return fmt.Errorf("%s.queue_len %d: must be positive", where, f.QueueLen)
	}
	switch ifmanager.InputFormat(f.Input) {
	case "":
		f.Input = string(ifmanager.InputF32)
	case ifmanager.InputF32, ifmanager.InputImageU8:
	default:
		return fmt.Errorf("%s.input %q: want %q or %q", where, f.Input, ifmanager.InputF32, ifmanager.InputImageU8)
	}
	return nil
}

// PolicyNone is the policy of IFs that run on their own share of the units,
// without the scheduler.
const PolicyNone = "none"

// checkPolicy checks a scheduling policy name; its error reads after the
// key.
func checkPolicy(p string) error {
	if _, err := sched.ParsePolicy(p); err != nil {
		names := []string{PolicyNone}
		for _, q := range sched.Policies() {
			names = append(names, string(q))
		}
		return fmt.Errorf("%q: want one of %s", p, strings.Join(names, ", "))
	}
	return nil
}

// inheritPolicy gives a cpu IF that names no policy the appliance's.
func (f *IFSection) inheritPolicy(appliancePolicy string) {
	if f.Policy == "" && (f.Backend == "" || f.Backend == "cpu") {
		f.Policy = appliancePolicy
	}
}

// SLO returns the IF's SLO as a duration.
func (f *IFSection) SLO() time.Duration { return time.Duration(f.SLOMS * float64(time.Millisecond)) }
