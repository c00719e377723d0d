//go:build !race

package sched

// raceEnabled reports a race-detector build.
const raceEnabled = false
