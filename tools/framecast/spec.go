package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Arrival processes a stream can use.
const (
	arrivalUniform   = "uniform"
	arrivalPoisson   = "poisson"
	arrivalLognormal = "lognormal"
	arrivalTrace     = "trace"
)

// Loop modes.
const (
	loopOpen   = "open"
	loopClosed = "closed"
)

// Defaults of a stream's keys.
const (
	defaultRate   = 10
	defaultSize   = 150528 // 224×224×3 uint8
	defaultSigma  = 1.0
	defaultHeight = 224
	defaultWidth  = 224
)

// streamKeys lists the keys -stream accepts, for error messages.
const streamKeys = "name, model, class, rate, size, hw, images, frames, arrival, sigma, trace, loop, concurrency, deadline"

// streamSpec is one -stream flag: what to send, to which model, how often.
type streamSpec struct {
	// Name labels the stream in the report; default "mMODEL/CLASS".
	Name  string `json:"name"`
	Model uint16 `json:"model"`
	// Class is "rt" or "be".
	Class string `json:"class"`
	// Rate is the mean arrival rate per second (open loop, not trace).
	Rate float64 `json:"rate_per_s,omitempty"`
	// Size is each frame's payload bytes.
	Size int `json:"size"`
	// Height and Width are the image size (images, or hw= for synthetic).
	Height int `json:"height,omitempty"`
	Width  int `json:"width,omitempty"`
	// Images is a file or directory of images to send instead of
	// synthetic frames.
	Images string `json:"images,omitempty"`
	// Frames is how many distinct synthetic frames to cycle through (0:
	// the -frames flag); with images, at most this many images (0: all).
	Frames int `json:"frames,omitempty"`
	// Arrival is uniform, poisson, lognormal or trace (open loop).
	Arrival string `json:"arrival,omitempty"`
	// Sigma is the lognormal inter-arrival's shape parameter.
	Sigma float64 `json:"sigma,omitempty"`
	// Trace is the trace file of arrival=trace.
	Trace string `json:"trace,omitempty"`
	// Loop is "open" (send on arrival) or "closed" (Concurrency requests
	// outstanding, the next sent when one ends).
	Loop        string `json:"loop"`
	Concurrency int    `json:"concurrency,omitempty"`
	// DeadlineMS, when positive, is sent as the request's deadline.
	DeadlineMS float64 `json:"deadline_ms,omitempty"`
}

// parseStream parses one -stream value: comma-separated key=value pairs.
// Errors quote the whole value and name the key at fault.
func parseStream(v string) (streamSpec, error) {
	s := streamSpec{Class: "be"}
	seen := map[string]bool{}
	for kv := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return s, fmt.Errorf("stream %q: %q is not key=value", v, kv)
		}
		if seen[k] {
			return s, fmt.Errorf("stream %q: key %q given twice", v, k)
		}
		seen[k] = true
		if err := s.setKey(k, strings.TrimSpace(val)); err != nil {
			return s, fmt.Errorf("stream %q: %w", v, err)
		}
	}
	if err := s.complete(seen); err != nil {
		return s, fmt.Errorf("stream %q: %w", v, err)
	}
	return s, nil
}

// setKey sets one key, checking its value on its own.
func (s *streamSpec) setKey(k, val string) error {
	var err error
	switch k {
	case "name":
		if val == "" || strings.ContainsAny(val, "|\n") {
			return fmt.Errorf("name %q: want a non-empty label without '|'", val)
		}
		s.Name = val
	case "model":
		var n uint64
		n, err = strconv.ParseUint(val, 10, 16)
		if err != nil {
			return fmt.Errorf("model %q: want an id 0..65535", val)
		}
		s.Model = uint16(n)
	case "class":
		if val != "rt" && val != "be" {
			return fmt.Errorf("class %q: want rt or be", val)
		}
		s.Class = val
	case "rate":
		s.Rate, err = positiveFloat(val)
		if err != nil {
			return fmt.Errorf("rate %q: %w", val, err)
		}
	case "size":
		s.Size, err = positiveInt(val)
		if err != nil {
			return fmt.Errorf("size %q: %w", val, err)
		}
	case "hw":
		s.Height, s.Width, err = parseHW(val)
		if err != nil {
			return fmt.Errorf("hw %q: %w", val, err)
		}
	case "images":
		if val == "" {
			return fmt.Errorf("images: want a file or directory")
		}
		s.Images = val
	case "frames":
		s.Frames, err = positiveInt(val)
		if err != nil {
			return fmt.Errorf("frames %q: %w", val, err)
		}
	case "arrival":
		switch val {
		case arrivalUniform, arrivalPoisson, arrivalLognormal, arrivalTrace:
			s.Arrival = val
		default:
			return fmt.Errorf("arrival %q: want uniform, poisson, lognormal or trace", val)
		}
	case "sigma":
		s.Sigma, err = strconv.ParseFloat(val, 64)
		if err != nil || !(s.Sigma > 0) || math.IsInf(s.Sigma, 0) || s.Sigma > 10 {
			return fmt.Errorf("sigma %q: want a number in (0, 10]", val)
		}
	case "trace":
		if val == "" {
			return fmt.Errorf("trace: want a file")
		}
		s.Trace = val
	case "loop":
		if val != loopOpen && val != loopClosed {
			return fmt.Errorf("loop %q: want open or closed", val)
		}
		s.Loop = val
	case "concurrency":
		s.Concurrency, err = positiveInt(val)
		if err != nil || s.Concurrency > 65536 {
			return fmt.Errorf("concurrency %q: want 1..65536", val)
		}
	case "deadline":
		s.DeadlineMS, err = positiveFloat(val)
		if err != nil || s.DeadlineMS*1000 > math.MaxUint32 {
			return fmt.Errorf("deadline %q: want milliseconds in (0, %d]", val, math.MaxUint32/1000)
		}
	default:
		return fmt.Errorf("unknown key %q (keys: %s)", k, streamKeys)
	}
	return nil
}

// complete checks the keys against each other and fills in defaults.
func (s *streamSpec) complete(seen map[string]bool) error {
	if !seen["model"] {
		return fmt.Errorf("model is required")
	}
	if err := s.completeLoop(seen); err != nil {
		return err
	}
	if err := s.completeSize(seen); err != nil {
		return err
	}
	if s.Name == "" {
		s.Name = fmt.Sprintf("m%d/%s", s.Model, s.Class)
	}
	return nil
}

// completeLoop settles the loop mode, the arrival process and its
// parameters.
func (s *streamSpec) completeLoop(seen map[string]bool) error {
	if s.Loop == "" {
		s.Loop = loopOpen
		if seen["concurrency"] {
			s.Loop = loopClosed
		}
	}
	if s.Loop == loopClosed {
		for _, k := range []string{"rate", "arrival", "sigma", "trace"} {
			if seen[k] {
				return fmt.Errorf("%s applies to loop=open; loop=closed sends the next request as soon as one ends", k)
			}
		}
		if s.Concurrency == 0 {
			s.Concurrency = 1
		}
		return nil
	}
	if seen["concurrency"] {
		return fmt.Errorf("concurrency applies to loop=closed")
	}
	if s.Trace != "" && s.Arrival == "" {
		s.Arrival = arrivalTrace
	}
	if s.Arrival == "" {
		s.Arrival = arrivalUniform
	}
	switch {
	case s.Arrival == arrivalTrace && s.Trace == "":
		return fmt.Errorf("arrival=trace needs trace=FILE")
	case s.Arrival != arrivalTrace && s.Trace != "":
		return fmt.Errorf("trace=FILE needs arrival=trace (it is %s)", s.Arrival)
	case s.Arrival == arrivalTrace && seen["rate"]:
		return fmt.Errorf("rate does not apply to arrival=trace: the trace sets the times")
	case seen["sigma"] && s.Arrival != arrivalLognormal:
		return fmt.Errorf("sigma applies to arrival=lognormal only")
	}
	if s.Arrival == arrivalLognormal && s.Sigma == 0 {
		s.Sigma = defaultSigma
	}
	if s.Arrival != arrivalTrace && s.Rate == 0 {
		s.Rate = defaultRate
	}
	return nil
}

// completeSize settles the frame size: hw= and images= imply H×W×3 bytes,
// which size= must then agree with.
func (s *streamSpec) completeSize(seen map[string]bool) error {
	if s.Images != "" && s.Height == 0 {
		s.Height, s.Width = defaultHeight, defaultWidth
	}
	if s.Height == 0 {
		if s.Size == 0 {
			s.Size = defaultSize
		}
		return nil
	}
	implied := s.Height * s.Width * 3
	if seen["size"] && s.Size != implied {
		return fmt.Errorf("size=%d disagrees with hw=%dx%d (%d×%d×3 = %d bytes)", s.Size, s.Height, s.Width, s.Height, s.Width, implied)
	}
	s.Size = implied
	return nil
}

// parseHW parses "HxW" (height by width, in pixels).
func parseHW(v string) (h, w int, err error) {
	hs, ws, ok := strings.Cut(strings.ToLower(v), "x")
	if !ok {
		return 0, 0, fmt.Errorf("want HEIGHTxWIDTH, e.g. 224x224")
	}
	if h, err = positiveInt(hs); err != nil {
		return 0, 0, fmt.Errorf("height: %w", err)
	}
	if w, err = positiveInt(ws); err != nil {
		return 0, 0, fmt.Errorf("width: %w", err)
	}
	if h > 8192 || w > 8192 {
		return 0, 0, fmt.Errorf("at most 8192x8192")
	}
	return h, w, nil
}

// positiveInt parses a decimal integer > 0.
func positiveInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive integer")
	}
	return n, nil
}

// positiveFloat parses a finite number > 0.
func positiveFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("want a positive number")
	}
	return f, nil
}

// streamList collects repeated -stream flags.
type streamList []streamSpec

func (l *streamList) String() string {
	if l == nil {
		return ""
	}
	names := make([]string, len(*l))
	for i, s := range *l {
		names[i] = s.Name
	}
	return strings.Join(names, " ")
}

// Set parses and appends one -stream value.
func (l *streamList) Set(v string) error {
	s, err := parseStream(v)
	if err != nil {
		return err
	}
	*l = append(*l, s)
	return nil
}
