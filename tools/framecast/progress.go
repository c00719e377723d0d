package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// isTerminal says whether f is a terminal (a character device).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// terminalWidth is f's width in columns, or 0 when unknown.
func terminalWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// progressOut is where the progress line goes: on a terminal it is
// rewritten in place, elsewhere it is one line per second.
type progressOut struct {
	w     io.Writer
	tty   bool
	width func() int // the terminal's width; 0 when unknown
}

// progress prints the progress line once a second until stop is closed.
func (c *client) progress(stop <-chan struct{}, out progressOut) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			if out.tty {
				fmt.Fprintln(out.w)
			}
			return
		case now := <-t.C:
			line := c.progressLine(now)
			if !out.tty {
				fmt.Fprintln(out.w, line)
				continue
			}
			if n := out.width(); n > 1 && len(line) >= n {
				line = line[:n-1] // a wrapped line cannot be rewritten
			}
			fmt.Fprintf(out.w, "\r%s\x1b[K", line)
		}
	}
}

// progressLine describes the run so far: per stream, the counts and the
// median and p99 latency of the last second's ok responses.
func (c *client) progressLine(now time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	el := now.Sub(c.start)
	phase := ""
	if el > c.cfg.Duration {
		phase = " draining"
	}
	fmt.Fprintf(&b, "[%4.0fs/%v%s] in flight %d", el.Seconds(), c.cfg.Duration, phase, c.inFlight)
	for _, st := range c.streams {
		r := st.c
		errs := 0
		for _, v := range r.Errors {
			errs += v
		}
		slices.Sort(st.recent)
		fmt.Fprintf(&b, " | %s sent %d ok %d err %d lost %d", r.Name, r.Sent, r.OK, errs, r.Lost)
		if len(st.recent) > 0 {
			fmt.Fprintf(&b, " p50 %.1fms p99 %.1fms", percentile(st.recent, 50), percentile(st.recent, 99))
		}
		st.recent = st.recent[:0]
	}
	return b.String()
}
