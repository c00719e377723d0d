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

// Plot geometry, in SVG user units.
const (
	plotW, plotH   = 900, 520
	marginL        = 70
	marginR        = 240 // room for the legend
	marginT        = 40
	marginB        = 55
	maxPlotPoints  = 2000 // per curve
	plotFontFamily = "sans-serif"
)

// plotColors are the curves' colours, in stream order.
var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// writePlot writes the latency CDF of every stream of r as SVG to path.
func (r *Report) writePlot(path string) error {
	var b bytes.Buffer
	writeSVG(&b, r.Streams)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// writeSVG draws one CDF curve per row from its sorted ok latencies: x is
// the latency in ms (linear, from 0), y the fraction of the row's ok
// responses at or below it.
func writeSVG(w io.Writer, rows []*Row) {
	xmax := 0.0
	for _, r := range rows {
		if len(r.lat) > 0 {
			xmax = max(xmax, r.lat[len(r.lat)-1])
		}
	}
	ticks := niceTicks(xmax)
	xmax = ticks[len(ticks)-1]
	pw, ph := float64(plotW-marginL-marginR), float64(plotH-marginT-marginB)
	px := func(v float64) float64 { return marginL + v/xmax*pw }
	py := func(f float64) float64 { return marginT + (1-f)*ph }

	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n",
		plotW, plotH, plotW, plotH, plotFontFamily)
	fmt.Fprintf(w, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(w, `<text x="%d" y="24" font-size="16">framecast: latency CDF of ok responses</text>`+"\n", marginL)
	writeAxes(w, ticks, px, py)
	for i, r := range rows {
		color := plotColors[i%len(plotColors)]
		if len(r.lat) > 0 {
			fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, cdfPoints(r.lat, px, py))
		}
		writeLegend(w, i, r, color)
	}
	fmt.Fprintln(w, "</svg>")
}

// writeAxes draws the frame, the grid, the ticks and the axis titles.
func writeAxes(w io.Writer, ticks []float64, px, py func(float64) float64) {
	x0, x1, y0, y1 := px(0), px(ticks[len(ticks)-1]), py(0), py(1)
	for _, t := range ticks {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", px(t), y0, px(t), y1)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(t), y0+16, fmtTick(t))
	}
	for i := 0; i <= 10; i++ {
		f := float64(i) / 10
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, py(f), x1, py(f))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">%.1f</text>`+"\n", x0-6, py(f)+4, f)
	}
	fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="black"/>`+"\n", x0, y1, x1-x0, y0-y1)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">latency (ms)</text>`+"\n", (x0+x1)/2, y0+40)
	fmt.Fprintf(w, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">fraction of ok responses</text>`+"\n",
		(y0+y1)/2, (y0+y1)/2)
}

// writeLegend draws row i's legend entry.
func writeLegend(w io.Writer, i int, r *Row, color string) {
	x, y := float64(plotW-marginR+20), float64(marginT+10+i*36)
	label := fmt.Sprintf("%s: no ok responses", r.Name)
	detail := ""
	if n := len(r.lat); n > 0 {
		label = fmt.Sprintf("%s (%d ok)", r.Name, n)
		detail = fmt.Sprintf("p50 %s, p99 %s ms", fmtTick(percentile(r.lat, 50)), fmtTick(percentile(r.lat, 99)))
	}
	fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", x, y, x+20, y, color)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+26, y+4, escapeXML(label))
	if detail != "" {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" fill="#555">%s</text>`+"\n", x+26, y+18, escapeXML(detail))
	}
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
