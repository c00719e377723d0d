package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"

	"sluice/ifmanager"
	"sluice/libml/cpu"
)

// Profile is a parsed appliance profile (TOML).
type Profile struct {
	Appliance ApplianceSection `toml:"appliance"`
	Ports     []PortSection    `toml:"port"`
	IFs       []IFSection      `toml:"if"`

	// name and text are where the profile came from, for errors that
	// name a key's line after parsing (an IF whose model fails to load).
	name, text string
}

// ApplianceSection holds process-wide settings.
type ApplianceSection struct {
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// LogFormat is "text" (default: key=value lines) or "json" (one JSON
	// object per line, for log collectors).
	LogFormat string `toml:"log_format"`
	// Threads is the CPU backend's worker units (0: all cores).
	Threads int `toml:"threads"`
	// ModelMemoryMB caps the memory one model may take on its backend,
	// in MiB: its weights, activations and constants at each batch size
	// (libml.BackendConfig.ModelMemoryLimit). Default: three quarters of
	// the machine's memory.
	ModelMemoryMB int64 `toml:"model_memory_mb"`
	// EAL is the DPDK EAL argument list (without the program name); empty
	// means the container-safe defaults.
	EAL []string `toml:"eal"`
	// ReassemblyTimeoutMS expires incomplete requests.
	ReassemblyTimeoutMS int `toml:"reassembly_timeout_ms"`
	// LateWindowMS is how long a port remembers a request after its
	// answer, so its late or duplicated fragments are dropped instead of
	// answered again (0: 10 x the reassembly timeout, at most the timeout
	// + 10 s; see docs/protocol.md).
	LateWindowMS int `toml:"late_window_ms"`
	// MaxLate caps the requests a port remembers at once (0: 64 x
	// max_inflight, within 4096..1048576).
	MaxLate int `toml:"max_late"`
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
	// Placement is how the cpu IFs' shares are set: PlacementGSLICE (the
	// default: each IF's share, self-tuned where auto_share) or
	// PlacementInSS (InSS's local stage: every PlanIntervalMS the cpu
	// units are split among the IFs under policy none by the latency
	// model over PlacementProfiles, from their observed arrival rates and
	// SLOs; changes are applied by shadow swaps).
	Placement         string `toml:"placement"`
	PlacementProfiles string `toml:"placement_profiles"`
	PlanIntervalMS    int    `toml:"plan_interval_ms"`
	// PlacementDevices splits the cpu units into this many groups that
	// play devices for the inss placement's global stage (1..64, default
	// 1: one device, the local stage alone): each IF is placed on one
	// group, and the group's units split among its IFs.
	PlacementDevices int `toml:"placement_devices"`
	// PlacementLearned is a learned scheduler (InSS's SACD placement and
	// TD3 shares, as tools/placementsim -save-learned writes it) that
	// plans each inss round instead of the greedy stages; a round whose
	// learned plan leaves an IF without units falls back to them.
	PlacementLearned string `toml:"placement_learned"`
	// Policy is the scheduling policy of the cpu IFs that do not name
	// their own: "none" (default: each IF runs on its share of the units)
	// or one of libml/sched's: reef, seq, conc, srpt, split.
	Policy string `toml:"policy"`
	// DrainTimeoutMS bounds the time from SIGTERM (or SIGINT) to exit
	// (default DefaultDrainTimeoutMS): ports answer in-flight requests for
	// at most half of it, control commands still running get at most a
	// quarter (and 5 s), and the sluice command exits when it has passed.
	DrainTimeoutMS int `toml:"drain_timeout_ms"`
	// CUDA says what runs the IFs on the cuda backend: "auto" (default:
	// the GPU through the driver, or the cpu backend when the machine has
	// no CUDA driver), "driver" (the GPU; without a driver those IFs fail
	// to load) or "emu" (the kernel emulator: the real CUDA kernels, plans,
	// streams and batch gather run on the CPU, for tests and demos of the
	// CUDA path on machines without a GPU; slow).
	CUDA string `toml:"cuda"`
}

// The [appliance] placement modes.
const (
	PlacementGSLICE = "gslice"
	PlacementInSS   = "inss"
)

// checkPlacement refuses an IF the placement cannot serve as it asks:
// auto_share under inss, whose local stage sets the shares itself (the
// profile's IFs and deployed ones alike).
func checkPlacement(placement string, spec *IFSection) error {
	if spec.AutoShare && placement == PlacementInSS {
		return errors.New("auto_share: the inss placement sets the shares (drop auto_share, or use placement \"gslice\")")
	}
	return nil
}

// The [appliance] cuda modes.
const (
	CUDAAuto   = "auto"
	CUDADriver = "driver"
	CUDAEmu    = "emu"
)

// Limits on the files the appliance reads.
const (
	// MaxProfileBytes caps a profile file (1 MiB).
	MaxProfileBytes = 1 << 20
	// ProfileReadTimeout bounds reading a profile file.
	ProfileReadTimeout = 5 * time.Second
	// MaxModelBytes caps an onnx: model file (2 GiB, protobuf's own
	// limit).
	MaxModelBytes = 2 << 30
	// DefaultDrainTimeoutMS is appliance.drain_timeout_ms when not given.
	DefaultDrainTimeoutMS = 10_000
	// MaxDrainTimeoutMS bounds appliance.drain_timeout_ms (10 minutes).
	MaxDrainTimeoutMS = 600_000
)

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
	// RecvBufferBytes and SendBufferBytes size a udp port's socket
	// buffers (0: DefaultRecvBufferBytes, DefaultSendBufferBytes). As
	// root the appliance sets them past net.core.rmem_max / wmem_max;
	// otherwise the kernel caps them there, and the port logs a warning.
	RecvBufferBytes int `toml:"recv_buffer_bytes"`
	SendBufferBytes int `toml:"send_buffer_bytes"`
}

// Socket buffer defaults of udp ports: the receive buffer holds two
// max-size requests (16 MiB each) arriving at once while the I/O loop is
// held off its core (the kernel reports twice the size asked for, its
// bookkeeping included).
const (
	DefaultRecvBufferBytes = 32 << 20
	DefaultSendBufferBytes = 8 << 20
	// MaxSocketBufferBytes bounds either (1 GiB).
	MaxSocketBufferBytes = 1 << 30
)

// IFSection is one [[if]] table: an inference function's spec, the same
// type the deploy command carries and the IF manager is configured from
// (see ifmanager.Spec for its keys and defaults).
type IFSection = ifmanager.Spec

// LoadProfile reads and validates a profile. Errors name the file and,
// where TOML can tell, the line and key. Only a regular file of at most
// MaxProfileBytes is read, within ProfileReadTimeout: a device
// (/dev/zero), a FIFO, a socket or a directory is refused at once.
func LoadProfile(path string) (*Profile, error) {
	return LoadProfileContext(context.Background(), path)
}

// LoadProfileContext is LoadProfile that also gives up when ctx ends.
func LoadProfileContext(ctx context.Context, path string) (*Profile, error) {
	data, err := readRegularFile(ctx, path, MaxProfileBytes, ProfileReadTimeout)
	if err != nil {
		return nil, fmt.Errorf("profile %w", err)
	}
	return ParseProfile(path, string(data))
}

// fileReads bounds the file reads in progress: a read that blocks (a hung
// network file system) is given up on, not stopped, and each holds one.
var fileReads = make(chan struct{}, 4)

// readRegularFile reads path when it is a regular file of at most limit
// bytes, giving up after timeout (0: none) or when ctx ends. It never
// blocks on opening: a FIFO is opened non-blocking, then refused with
// every other file that is not regular. Errors start with the path.
func readRegularFile(ctx context.Context, path string, limit int64, timeout time.Duration) ([]byte, error) {
	select {
	case fileReads <- struct{}{}:
	default:
		return nil, fmt.Errorf("%s: not read: %d earlier file reads are still blocked", path, cap(fileReads))
	}
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-fileReads }()
		data, err := readRegular(path, limit)
		done <- result{data, err}
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-done:
		return r.data, r.err
	case <-expired:
		return nil, fmt.Errorf("%s: not read within %s", path, timeout)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: not read: %w", path, context.Cause(ctx))
	}
}

func readRegular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %w", path, pe.Err)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s, not a regular file", path, fileKind(fi.Mode()))
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, larger than the %s limit", path, fi.Size(), byteSize(limit))
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than the %s limit", path, byteSize(limit))
	}
	return data, nil
}

// fileKind names the type of a file that is not regular.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

// byteSize writes a power-of-two limit ("1 MiB", "2 GiB").
func byteSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d-byte", n)
}

// ifError places an error about the IF at index i of the profile at the
// line of its key (or of its [[if]] header when key is not written there):
// "profile p.toml:14: if[1].model "onnx:m.onnx": ...".
func (p *Profile) ifError(i int, key string, err error) error {
	what := fmt.Sprintf("if[%d]", i)
	if key != "" {
		what += "." + key
		if key == "model" && i < len(p.IFs) {
			what += fmt.Sprintf(" %q", p.IFs[i].Model)
		}
	}
	if p.name == "" {
		return fmt.Errorf("profile: %s: %w", what, err)
	}
	where := p.name
	if line := findLine(p.text, "if", i, key); line > 0 {
		where = fmt.Sprintf("%s:%d", p.name, line)
	}
	return fmt.Errorf("profile %s: %s: %w", where, what, err)
}

// ParseProfile parses a profile's text; name is used in errors.
func ParseProfile(name, text string) (*Profile, error) {
	// Syntax first, then values: an error in the second pass is about
	// one key's value, and says which.
	var syntax map[string]any
	if _, err := toml.Decode(text, &syntax); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("profile %s:%d: %s", name, pe.Position.Line, pe.Message)
		}
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	var p Profile
	md, err := toml.Decode(text, &p)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) && pe.LastKey != "" {
			return nil, fmt.Errorf("profile %s:%d: %s: %s", name, pe.Position.Line, indexKey(text, pe.LastKey, pe.Position.Line), pe.Message)
		}
		if m := tomlValueErr.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			return nil, fmt.Errorf("profile %s:%d: %s: %s", name, line, indexKey(text, m[2], line), m[3])
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
	err = p.checkExplicitZeros(syntax)
	if err == nil {
		err = p.validate()
	}
	if err != nil {
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
	p.name, p.text = name, text
	return &p, nil
}

// tomlValueErr matches BurntSushi/toml's errors for a value of the wrong
// type: `toml: line 7 (last key "if.slo_ms"): incompatible types: ...`.
var tomlValueErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// indexKey writes a TOML key path the way validation errors do: a key in
// an array of tables ("if.model_id") gets the table's index from the
// [[if]] headers above line ("if[1].model_id").
func indexKey(text, key string, line int) string {
	table, rest, ok := strings.Cut(key, ".")
	if !ok {
		return key
	}
	n := -1
	for i, l := range strings.Split(text, "\n") {
		if i+1 >= line {
			break
		}
		t := strings.TrimSpace(l)
		if c := strings.IndexByte(t, '#'); c >= 0 {
			t = strings.TrimSpace(t[:c])
		}
		if strings.HasPrefix(t, "[[") && strings.TrimSpace(strings.Trim(t, "[]")) == table {
			n++
		}
	}
	if n < 0 {
		return key
	}
	return fmt.Sprintf("%s[%d].%s", table, n, rest)
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

// zeroMeansDefault are the [[if]] keys whose zero value stands for "not
// given" (the spec's default); written out as 0 they are an error, not a
// silent default.
var zeroMeansDefault = map[string]string{
	"max_batch": fmt.Sprintf("out of range 1..%d", ifmanager.MaxBatchLimit),
	"min_batch": "out of range 1..max_batch",
	"queue_len": fmt.Sprintf("out of range 1..%d", ifmanager.MaxQueueLen),
}

// checkExplicitZeros refuses keys written as 0 whose zero value would
// otherwise mean "the default" (syntax is the profile decoded as a map).
func (p *Profile) checkExplicitZeros(syntax map[string]any) error {
	ifs, _ := syntax["if"].([]map[string]any)
	for i, f := range ifs {
		for _, key := range []string{"max_batch", "min_batch", "queue_len"} {
			if v, ok := f[key].(int64); ok && v == 0 {
				return fmt.Errorf("if[%d].%s 0: %s (leave the key out for the default)", i, key, zeroMeansDefault[key])
			}
		}
	}
	return nil
}

// defaultModelMemoryMB is three quarters of the machine's memory
// (/proc/meminfo's MemTotal), in MiB; 0 (no limit) where that is not
// known.
func defaultModelMemoryMB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb / 1024 * 3 / 4
		}
	}
	return 0
}

func (p *Profile) validate() error {
	a := &p.Appliance
	if a.Threads < 0 || a.Threads > cpu.MaxUnits {
		return fmt.Errorf("appliance.threads %d: want 0 (one unit per core) or 1..%d", a.Threads, cpu.MaxUnits)
	}
	switch {
	case a.ModelMemoryMB < 0:
		return fmt.Errorf("appliance.model_memory_mb %d: want a positive size in MiB (leave the key out for three quarters of the machine's memory)", a.ModelMemoryMB)
	case a.ModelMemoryMB == 0:
		a.ModelMemoryMB = defaultModelMemoryMB()
	}
	switch a.LogFormat {
	case "":
		a.LogFormat = "text"
	case "text", "json":
	default:
		return fmt.Errorf("appliance.log_format %q: want text or json", a.LogFormat)
	}
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
	if a.LateWindowMS < 0 || a.LateWindowMS > 3600_000 {
		return fmt.Errorf("appliance.late_window_ms %d: want 0 (the default) to 3600000", a.LateWindowMS)
	}
	if a.MaxLate < 0 || a.MaxLate > 1<<24 {
		return fmt.Errorf("appliance.max_late %d: want 0 (the default) to %d", a.MaxLate, 1<<24)
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
	if a.Policy == "" {
		a.Policy = PolicyNone
	}
	switch a.Placement {
	case "":
		a.Placement = PlacementGSLICE
	case PlacementGSLICE:
	case PlacementInSS:
		if a.PlacementProfiles == "" {
			return errors.New("appliance.placement_profiles: required with placement \"inss\" (tools/inssprof -json writes them)")
		}
	default:
		return fmt.Errorf("appliance.placement %q: want %q or %q", a.Placement, PlacementGSLICE, PlacementInSS)
	}
	if a.PlanIntervalMS == 0 {
		a.PlanIntervalMS = 1000
	}
	if a.PlacementDevices == 0 {
		a.PlacementDevices = 1
	}
	if a.PlacementDevices < 1 || a.PlacementDevices > 64 {
		return fmt.Errorf("appliance.placement_devices %d: out of range 1..64", a.PlacementDevices)
	}
	if a.PlacementLearned != "" && a.Placement != PlacementInSS {
		return errors.New("appliance.placement_learned: only with placement \"inss\" (it plans that placement's rounds)")
	}
	if a.PlacementDevices > 1 && a.Placement != PlacementInSS {
		return fmt.Errorf("appliance.placement_devices %d: only with placement \"inss\" (its global stage places IFs on them)", a.PlacementDevices)
	}
	if a.PlanIntervalMS < 10 || a.PlanIntervalMS > 3600_000 {
		return fmt.Errorf("appliance.plan_interval_ms %d: out of range 10..3600000", a.PlanIntervalMS)
	}
	if a.DrainTimeoutMS == 0 {
		a.DrainTimeoutMS = DefaultDrainTimeoutMS
	}
	if a.DrainTimeoutMS < 0 || a.DrainTimeoutMS > MaxDrainTimeoutMS {
		return fmt.Errorf("appliance.drain_timeout_ms %d: out of range 1..%d", a.DrainTimeoutMS, MaxDrainTimeoutMS)
	}
	if err := ifmanager.CheckPolicy(a.Policy); err != nil {
		return fmt.Errorf("appliance.policy %w", err)
	}
	switch a.CUDA {
	case "":
		a.CUDA = CUDAAuto
	case CUDAAuto, CUDADriver, CUDAEmu:
	default:
		return fmt.Errorf("appliance.cuda %q: want %q, %q or %q", a.CUDA, CUDAAuto, CUDADriver, CUDAEmu)
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
		if pt.RecvBufferBytes == 0 {
			pt.RecvBufferBytes = DefaultRecvBufferBytes
		}
		if pt.SendBufferBytes == 0 {
			pt.SendBufferBytes = DefaultSendBufferBytes
		}
		for _, b := range []struct {
			key string
			v   int
		}{{"recv_buffer_bytes", pt.RecvBufferBytes}, {"send_buffer_bytes", pt.SendBufferBytes}} {
			if b.v < 4096 || b.v > MaxSocketBufferBytes {
				return fmt.Errorf("%s.%s %d: out of range 4096..%d", where, b.key, b.v, MaxSocketBufferBytes)
			}
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
	ids := map[uint16]string{}
	ifNames := map[string]bool{}
	for i := range p.IFs {
		f := &p.IFs[i]
		if err := f.Resolve(a.Policy); err != nil {
			return fmt.Errorf("if[%d].%w", i, err)
		}
		if err := checkPlacement(a.Placement, f); err != nil {
			return fmt.Errorf("if[%d].%w", i, err)
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
	return checkPipelines(p.IFs)
}

// checkPipelines checks the profile's pipelines: every next names an IF
// of the profile, and no chain of next names loops or has more than
// ifmanager.MaxStages stages.
func checkPipelines(ifs []IFSection) error {
	next := map[string]string{}
	for _, f := range ifs {
		next[f.Name] = f.Next
	}
	for i, f := range ifs {
		if f.Next == "" {
			continue
		}
		if _, ok := next[f.Next]; !ok {
			return fmt.Errorf("if[%d].next %q: no IF of that name in the profile", i, f.Next)
		}
		seen := map[string]bool{f.Name: true}
		for n, stages := f.Next, 2; n != ""; n, stages = next[n], stages+1 {
			if seen[n] {
				return fmt.Errorf("if[%d].next %q: the pipeline loops back to %q", i, f.Next, n)
			}
			if stages > ifmanager.MaxStages {
				return fmt.Errorf("if[%d].next %q: the pipeline has more than %d stages", i, f.Next, ifmanager.MaxStages)
			}
			seen[n] = true
		}
	}
	return nil
}

// NewLogger makes the logger the appliance section asks for (log_level,
// log_format), writing to w.
func (a *ApplianceSection) NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(a.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if a.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// PolicyNone is the policy of IFs that run on their own share of the units,
// without the scheduler.
const PolicyNone = ifmanager.PolicyNone
