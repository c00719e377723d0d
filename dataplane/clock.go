package dataplane

import "time"

// start is the process's clock origin, set once at package init and never
// written again.
var start = time.Now()

// Now is the dataplane's clock: monotonic nanoseconds since the process
// started. Request timestamps (first and last fragment, queued, gathered,
// computed, sent) all use it, so they can be subtracted across stages.
func Now() int64 { return int64(time.Since(start)) }
