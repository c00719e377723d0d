package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Plot geometry, in SVG user units: two panels side by side (the CDF and
// its tail on a log scale), the latency over time below them, the legend
// on the right.
const (
	plotW, plotH   = 1240, 900
	legendW        = 250
	panelGap       = 70
	marginL        = 70
	marginT        = 70
	topH           = 400
	timeTop        = marginT + topH + 80
	timeH          = 260
	maxPlotPoints  = 2000 // per curve
	maxTimePoints  = 3000 // per stream in the time panel
	plotFontFamily = "sans-serif"
)

// plotColors are the curves' colours, in stream order.
var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// writePlot writes r's latency plot as SVG to path.
func (r *Report) writePlot(path string) error {
	var b bytes.Buffer
	writeSVG(&b, r)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// panel is one plot area: its frame in SVG units and its axes' ranges.
type panel struct {
	x0, y0, w, h float64 // top-left corner and size
	xmax, ymax   float64 // linear axes from 0
	logDecades   int     // > 0: the y axis is log10, from 1 down 10^-logDecades
}

func (p *panel) px(v float64) float64 { return p.x0 + v/p.xmax*p.w }

func (p *panel) py(v float64) float64 {
	if p.logDecades > 0 {
		d := -math.Log10(max(v, math.Pow(10, -float64(p.logDecades))))
		return p.y0 + d/float64(p.logDecades)*p.h
	}
	return p.y0 + (1-v/p.ymax)*p.h
}

// writeSVG draws r's streams: the latency CDF of each one's ok responses
// (x: latency in ms from 0, y: the fraction at or below it), the same
// distribution's tail on a log scale (y: the fraction above it, down to
// one response in the stream's count), and every ok response's latency by
// the time its request was sent. The title carries the run's parameters;
// an -slo is a dashed marker in every panel and a figure in the legend.
func writeSVG(w io.Writer, r *Report) {
	rows := r.Streams
	xmax, decades := 0.0, 1
	for _, row := range rows {
		if n := len(row.lat); n > 0 {
			xmax = max(xmax, row.lat[n-1])
			decades = max(decades, min(6, int(math.Ceil(math.Log10(float64(n))))))
		}
	}
	if r.SLOMS > 0 {
		xmax = max(xmax, r.SLOMS*1.05)
	}
	ticks := niceTicks(xmax)
	xmax = ticks[len(ticks)-1]
	sendS := max(r.SendSeconds, 1e-3)
	timeTicks := niceTicks(sendS)
	pw := float64(plotW-legendW-marginL-panelGap) / 2
	cdf := &panel{x0: marginL, y0: marginT, w: pw, h: topH, xmax: xmax, ymax: 1}
	tail := &panel{x0: marginL + pw + panelGap, y0: marginT, w: pw, h: topH, xmax: xmax, logDecades: decades}
	timeP := &panel{x0: marginL, y0: timeTop, w: 2*pw + panelGap, h: timeH, xmax: timeTicks[len(timeTicks)-1], ymax: xmax}

	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n",
		plotW, plotH, plotW, plotH, plotFontFamily)
	fmt.Fprintf(w, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(w, `<text x="%d" y="24" font-size="16">%s</text>`+"\n", marginL, escapeXML(plotTitle(r)))
	fmt.Fprintf(w, `<text x="%d" y="44" fill="#555">%s</text>`+"\n", marginL, escapeXML(plotSubtitle(r)))

	writeFrame(w, cdf, ticks, "latency (ms)", "fraction of ok responses", "latency CDF")
	writeFrame(w, tail, ticks, "latency (ms)", "fraction above (log)", "tail")
	writeFrame(w, timeP, timeTicks, "request sent (s after the start)", "latency (ms)", "latency over time")
	if r.SLOMS > 0 {
		for _, p := range []*panel{cdf, tail} {
			fmt.Fprintf(w, `<line class="slo" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="6 4"/>`+"\n",
				p.px(r.SLOMS), p.y0, p.px(r.SLOMS), p.y0+p.h)
		}
		fmt.Fprintf(w, `<line class="slo" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="6 4"/>`+"\n",
			timeP.x0, timeP.py(r.SLOMS), timeP.x0+timeP.w, timeP.py(r.SLOMS))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">SLO %s ms</text>`+"\n", cdf.px(r.SLOMS)+4, cdf.y0+14, fmtTick(r.SLOMS))
	}
	for i, row := range rows {
		color := plotColors[i%len(plotColors)]
		if len(row.lat) > 0 {
			fmt.Fprintf(w, `<polyline class="cdf" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, cdfPoints(row.lat, cdf.px, cdf.py))
			fmt.Fprintf(w, `<polyline class="tail" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, tailPoints(row.lat, tail))
			writeTimePoints(w, row.series, timeP, color)
		}
		writeLegend(w, i, row, color, r.SLOMS)
	}
	fmt.Fprintln(w, "</svg>")
}

// plotTitle names the run: framecast, its target and its streams.
func plotTitle(r *Report) string {
	names := make([]string, len(r.Streams))
	for i, s := range r.Streams {
		names[i] = s.Name
	}
	return fmt.Sprintf("framecast → %s: %s", r.Target, strings.Join(names, ", "))
}

// plotSubtitle gives the run's parameters.
func plotSubtitle(r *Report) string {
	s := fmt.Sprintf("sent for %.1f s from %s, timeout %s s, seed %d", r.SendSeconds, r.Start, fmtTick(r.TimeoutSeconds), r.Seed)
	if r.PaceBps > 0 {
		s += fmt.Sprintf(", paced at %s MB/s", fmtTick(r.PaceBps/1e6))
	}
	if r.SLOMS > 0 {
		s += fmt.Sprintf(", SLO %s ms", fmtTick(r.SLOMS))
	}
	return s + ", framecast " + r.Version
}

// writeFrame draws a panel's frame, grid, ticks and titles.
func writeFrame(w io.Writer, p *panel, xticks []float64, xtitle, ytitle, title string) {
	x1, y1 := p.x0+p.w, p.y0+p.h
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-weight="bold">%s</text>`+"\n", p.x0, p.y0-8, escapeXML(title))
	for _, t := range xticks {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", p.px(t), p.y0, p.px(t), y1)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", p.px(t), y1+16, fmtTick(t))
	}
	switch {
	case p.logDecades > 0:
		for d := 0; d <= p.logDecades; d++ {
			v := math.Pow(10, -float64(d))
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", p.x0, p.py(v), x1, p.py(v))
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", p.x0-6, p.py(v)+4, fmtTick(v))
		}
	default:
		yt := niceTicks(p.ymax)
		if p.ymax == 1 {
			yt = []float64{0, 0.2, 0.4, 0.6, 0.8, 1}
		}
		for _, v := range yt {
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", p.x0, p.py(v), x1, p.py(v))
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", p.x0-6, p.py(v)+4, fmtTick(v))
		}
	}
	fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="black"/>`+"\n", p.x0, p.y0, p.w, p.h)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", p.x0+p.w/2, y1+36, escapeXML(xtitle))
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
		p.x0-48, p.y0+p.h/2, p.x0-48, p.y0+p.h/2, escapeXML(ytitle))
}

// writeLegend draws row i's legend entry.
func writeLegend(w io.Writer, i int, r *Row, color string, sloMS float64) {
	x, y := float64(plotW-legendW+20), float64(marginT+10+i*50)
	label := fmt.Sprintf("%s: no ok responses", r.Name)
	var details []string
	if n := len(r.lat); n > 0 {
		label = fmt.Sprintf("%s (%d ok)", r.Name, n)
		details = append(details, fmt.Sprintf("p50 %s, p99 %s, max %s ms", fmtTick(percentile(r.lat, 50)), fmtTick(percentile(r.lat, 99)), fmtTick(r.lat[n-1])))
		if sloMS > 0 {
			details = append(details, fmt.Sprintf("within the SLO: %.2f%%", 100*withinSLO(r.lat, sloMS)))
		}
	}
	fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", x, y, x+20, y, color)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+26, y+4, escapeXML(label))
	for k, d := range details {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" fill="#555">%s</text>`+"\n", x+26, y+18+14*float64(k), escapeXML(d))
	}
}

// withinSLO is the fraction of sorted latencies v at or below slo.
func withinSLO(v []float64, slo float64) float64 {
	if len(v) == 0 {
		return 0
	}
	lo, hi := 0, len(v)
	for lo < hi {
		m := (lo + hi) / 2
		if v[m] <= slo {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return float64(lo) / float64(len(v))
}

// cdfPoints returns the polyline of a step CDF through sorted v, thinned
// to at most maxPlotPoints points.
func cdfPoints(v []float64, px, py func(float64) float64) string {
	var b strings.Builder
	n := len(v)
	step := max(1, n/maxPlotPoints)
	prev := 0.0
	fmt.Fprintf(&b, "%.1f,%.1f", px(v[0]), py(0))
	for i := 0; i < n; i += step {
		j := min(i+step, n) - 1 // the last of this group
		f := float64(j+1) / float64(n)
		fmt.Fprintf(&b, " %.1f,%.1f %.1f,%.1f", px(v[i]), py(prev), px(v[j]), py(f))
		prev = f
	}
	return b.String()
}

// tailPoints returns the polyline of the fraction of sorted v above each
// value (1 - CDF), on the panel's log axis; the last response (nothing
// above it) ends the curve at the axis' floor.
func tailPoints(v []float64, p *panel) string {
	var b strings.Builder
	n := len(v)
	step := max(1, n/maxPlotPoints)
	fmt.Fprintf(&b, "%.1f,%.1f", p.px(0), p.py(1))
	for i := 0; i < n; i += step {
		above := float64(n-i-1) / float64(n)
		fmt.Fprintf(&b, " %.1f,%.1f", p.px(v[i]), p.py(float64(n-i)/float64(n)))
		fmt.Fprintf(&b, " %.1f,%.1f", p.px(v[i]), p.py(above))
	}
	return b.String()
}

// writeTimePoints draws each ok response (thinned to maxTimePoints, evenly)
// as a dot at its send time and latency.
func writeTimePoints(w io.Writer, s []timedLatency, p *panel, color string) {
	if len(s) == 0 {
		return
	}
	step := max(1, len(s)/maxTimePoints)
	fmt.Fprintf(w, `<g class="time" fill="%s" fill-opacity="0.6">`+"\n", color)
	for i := 0; i < len(s); i += step {
		fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="1.6"/>`+"\n", p.px(min(s[i].at, p.xmax)), p.py(min(s[i].ms, p.ymax)))
	}
	fmt.Fprintln(w, "</g>")
}

// niceTicks returns 0 and evenly spaced round values up to at least xmax.
func niceTicks(xmax float64) []float64 {
	if !(xmax > 0) || math.IsInf(xmax, 0) {
		xmax = 1
	}
	raw := xmax / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for i := 0; ; i++ {
		t := float64(i) * step
		out = append(out, t)
		if t >= xmax*(1-1e-9) {
			return out
		}
	}
}

// fmtTick formats an axis value without needless digits.
func fmtTick(v float64) string {
	return fmt.Sprintf("%.4g", v)
}

// escapeXML escapes text for an XML text node.
func escapeXML(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
