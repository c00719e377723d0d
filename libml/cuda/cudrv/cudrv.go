package cudrv

import "regexp"

// Threads is the block size of every kernel launch (Function.Launch)
// and occupancy query (Function.Occupancy).
const Threads = 256

// Driver is the loaded CUDA driver.
type Driver struct {
	// Version is the driver API version (12040 = 12.4), Devices the
	// device count, Green whether green contexts are available.
	Version int
	Devices int
	Green   bool
}

// Module is one PTX module to load (Device.LoadKernels).
type Module struct {
	// Name is the module's name ("gemm" for gemm.cu), used in errors.
	Name string
	// PTX is the module text.
	PTX []byte
}

// reEntry matches a kernel entry's declaration in PTX text.
var reEntry = regexp.MustCompile(`(?m)^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(`)

// EntryNames returns the names of the kernel entries (.visible .entry)
// declared in a PTX module, in the order they appear: the functions
// Device.LoadKernels looks up.
func EntryNames(ptx []byte) []string {
	var out []string
	for _, m := range reEntry.FindAllSubmatch(ptx, -1) {
		out = append(out, string(m[1]))
	}
	return out
}
