package main

import (
	"cmp"
	"fmt"
	"math"
	"strings"
)

// plot draws two line charts side by side as SVG: one client's p50 latency
// against the number of masters, and throughput on N=5 against the number
// of clients. It returns "" when neither was measured.
func plot(m map[string]float64) string {
	series := func(key func(x int, lib string) string, xs []int, scale float64) map[string][]float64 {
		out := map[string][]float64{}
		for _, lb := range libs {
			var ys []float64
			found := true // a library that ran at every x
			for _, x := range xs {
				v, ok := m[key(x, lb.name)]
				found = found && ok
				ys = append(ys, v*scale)
			}
			if found {
				out[lb.name] = ys
			}
		}
		return out
	}
	ns := []int{1, 3, 5, 7}
	lat := series(func(x int, lib string) string { return fmt.Sprintf("seq%d %s p50", x, lib) }, ns, 1e-6) // ns → ms
	thr := series(func(x int, lib string) string { return fmt.Sprintf("scale%d-5 %s rate", x, lib) }, scaleClients, 1)
	if len(lat) == 0 && len(thr) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="960" height="400" font-family="sans-serif" font-size="12">`+"\n")
	b.WriteString(`<rect width="960" height="400" fill="white"/>` + "\n")
	chart(&b, 0, "one client: p50 lock+unlock (ms) by masters N", ns, lat, false)
	chart(&b, 480, "N=5: cycles/s by clients (log scale)", scaleClients, thr, true)
	b.WriteString("</svg>\n")
	return b.String()
}

var colors = map[string]string{
	"quorumlock":          "#1f77b4",
	"quorumlock (pooled)": "#2ca02c",
	qlOwnPoolName:         "#17becf",
	floorName:             "#7f7f7f",
	floorReaderName:       "#bcbd22",
	rsGoRedisName:         "#ff7f0e",
	qlGoRedisName:         "#8c564b",
	"go-redsync":          "#d62728",
	"bsm/redislock":       "#9467bd",
}

func chart(b *strings.Builder, x0 float64, title string, xs []int, series map[string][]float64, logX bool) {
	const w, h, left, top, bottom = 440.0, 400.0, 60.0, 40.0, 60.0
	pw, ph := w-left-20, h-top-bottom
	ymax := 0.0
	for _, ys := range series {
		for _, y := range ys {
			ymax = math.Max(ymax, y)
		}
	}
	if ymax == 0 {
		ymax = 1
	}
	ymax *= 1.1
	xpos := func(i int) float64 {
		if logX {
			lo, hi := math.Log(float64(xs[0])), math.Log(float64(xs[len(xs)-1]))
			return x0 + left + pw*(math.Log(float64(xs[i]))-lo)/(hi-lo)
		}
		return x0 + left + pw*float64(xs[i]-xs[0])/float64(xs[len(xs)-1]-xs[0])
	}
	ypos := func(y float64) float64 { return top + ph*(1-y/ymax) }
	fmt.Fprintf(b, `<text x="%.0f" y="20" font-weight="bold">%s</text>`+"\n", x0+left, title)
	fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", x0+left, top+ph, x0+left+pw, top+ph)
	fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", x0+left, top, x0+left, top+ph)
	for i, x := range xs {
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle">%d</text>`+"\n", xpos(i), top+ph+16, x)
	}
	for k := 0; k <= 4; k++ {
		y := ymax * float64(k) / 4
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", x0+left-6, ypos(y)+4, short(y))
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#ddd"/>`+"\n", x0+left, ypos(y), x0+left+pw, ypos(y))
	}
	row := 0
	for _, lb := range libs {
		ys, ok := series[lb.name]
		if !ok {
			continue
		}
		c := cmp.Or(colors[lb.name], "#000000")
		var pts []string
		for i, y := range ys {
			if y > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos(i), ypos(y)))
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", xpos(i), ypos(y), c)
			}
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			x0+left+10+float64(row%2)*180, h-28+float64(row/2)*14, c, x0+left+24+float64(row%2)*180, h-19+float64(row/2)*14, lb.name)
		row++
	}
}

func short(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
