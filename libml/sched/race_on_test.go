//go:build race

package sched

// raceEnabled reports a race-detector build, whose instrumentation slows
// blocks down unevenly enough to change timing-based decisions.
const raceEnabled = true
