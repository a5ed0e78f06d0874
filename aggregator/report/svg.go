package report

import (
	"html"
	"html/template"
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	svgW, svgH       = 720, 200
	padL, padR       = 56, 12
	padT, padB       = 24, 28
	plotW, plotH     = svgW - padL - padR, svgH - padT - padB
	seriesRequests   = "#1f77b4"
	seriesRefused    = "#d62728"
	seriesChallenged = "#ff7f0e"
	missingFill      = "#eeeeee"
)

// svgChart draws c's requests, refused and challenged series as lines on
// one scale, with the buckets that miss windows shaded: inline SVG, no
// external reference, no script.
func svgChart(c chart) template.HTML {
	var b strings.Builder
	top := maxOf(c.points)
	if top == 0 {
		top = 1
	}
	n := len(c.points)
	x := func(i int) float64 {
		if n <= 1 {
			return padL + plotW/2
		}
		return padL + float64(i)*plotW/float64(n-1)
	}
	y := func(v uint64) float64 { return padT + plotH - float64(v)*plotH/float64(top) }
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	b.WriteString(`<svg viewBox="0 0 ` + strconv.Itoa(svgW) + ` ` + strconv.Itoa(svgH) + `" width="` + strconv.Itoa(svgW) + `" height="` + strconv.Itoa(svgH) + `" role="img">`)
	b.WriteString(`<title>` + html.EscapeString(plain(c.title)) + `</title>`)
	// Buckets missing windows, shaded across their width.
	bw := float64(plotW)
	if n > 1 {
		bw = float64(plotW) / float64(n-1)
	}
	for i, p := range c.points {
		if p.Missing > 0 {
			b.WriteString(`<rect x="` + f(x(i)-bw/2) + `" y="` + f(padT) + `" width="` + f(bw) + `" height="` + f(plotH) + `" fill="` + missingFill + `"/>`)
		}
	}
	b.WriteString(`<line x1="` + f(padL) + `" y1="` + f(padT+plotH) + `" x2="` + f(padL+plotW) + `" y2="` + f(padT+plotH) + `" stroke="#999"/>`)
	b.WriteString(`<line x1="` + f(padL) + `" y1="` + f(padT) + `" x2="` + f(padL) + `" y2="` + f(padT+plotH) + `" stroke="#999"/>`)
	for _, s := range []struct {
		color string
		v     func(Point) uint64
	}{
		{seriesRequests, func(p Point) uint64 { return p.Requests }},
		{seriesRefused, func(p Point) uint64 { return p.Refused }},
		{seriesChallenged, func(p Point) uint64 { return p.Challenged }},
	} {
		// A bucket with missing windows and nothing counted is unknown,
		// not zero: the line breaks there.
		open := false
		for i, p := range c.points {
			if p.Missing > 0 && p.Requests == 0 {
				if open {
					b.WriteString(`"/>`)
					open = false
				}
				continue
			}
			if !open {
				b.WriteString(`<polyline fill="none" stroke-width="1.5" stroke="` + s.color + `" points="`)
				open = true
			} else {
				b.WriteByte(' ')
			}
			b.WriteString(f(x(i)) + "," + f(y(s.v(p))))
		}
		if open {
			b.WriteString(`"/>`)
		}
	}
	text := func(x, y float64, anchor, s string) {
		b.WriteString(`<text x="` + f(x) + `" y="` + f(y) + `" text-anchor="` + anchor + `">` + html.EscapeString(s) + `</text>`)
	}
	text(padL-4, padT+4, "end", u(top))
	text(padL-4, padT+plotH, "end", "0")
	text(padL, svgH-8, "start", stamp(first(c.points).Start))
	text(padL+plotW, svgH-8, "end", stamp(last(c.points).End))
	legend := []struct{ color, name string }{{seriesRequests, "requests"}, {seriesRefused, "refused"}, {seriesChallenged, "challenged"}, {missingFill, "windows missing"}}
	lx := float64(padL)
	for _, l := range legend {
		b.WriteString(`<rect x="` + f(lx) + `" y="6" width="10" height="10" fill="` + l.color + `"/>`)
		text(lx+14, 15, "start", l.name)
		lx += 14 + 7*float64(len(l.name)) + 16
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from escaped text and numbers only
}
