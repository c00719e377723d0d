// Package buildinfo says which build of sluice is running: the version
// string the Makefile stamps into every binary (git describe), shown by
// `sluice -version`, `ifctl -version`, `framecast -version`, `ifctl
// status` and the sluice_build_info metric.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time: go build -ldflags "-X
// sluice/appliance/buildinfo.version=v0.4.0-12-gabcdef0".
var version string

// Version is the build's version: the stamped one, else the main
// module's version from the build information, else "devel".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// GoVersion is the Go release the binary was built with.
func GoVersion() string { return runtime.Version() }

// String is a program's version line: "sluice v0.4.0 (go1.26.8 linux/amd64)".
func String(program string) string {
	return fmt.Sprintf("%s %s (%s %s/%s)", program, Version(), GoVersion(), runtime.GOOS, runtime.GOARCH)
}
