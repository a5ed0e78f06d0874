package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/visible"
)

// Format is a report's output format.
type Format uint8

// The formats.
const (
	Markdown Format = iota
	HTML
	JSON
	CSV
)

var formatNames = [...]string{Markdown: "md", HTML: "html", JSON: "json", CSV: "csv"}

// String returns the format's flag name.
func (f Format) String() string { return formatNames[f] }

// ParseFormat returns the format named s: md, html, json or csv.
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if s == n {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("format %q: want md, html, json or csv", s)
}

// document is what the md, html and csv renderers share: titled sections
// of paragraphs, tables and charts, every cell already a string.
type document struct {
	title    string
	meta     [][2]string
	warnings []string
	sections []section
}

type section struct {
	title  string
	sub    bool // a subsection (a tier's)
	text   []string
	tables []table
	charts []chart
}

type table struct {
	name string // the csv's table column
	// title labels the table, or says it is empty ("Title: none."), in
	// a section of several, where a bare "None." would not say which
	// is; "" in a section whose title says what its one table is.
	title string
	cols  []string
	rows  [][]string
	// code are the columns whose cells are a client's text or a path (an
	// identity, a list target, an alert's key, a rule id, a file), which
	// the Markdown report shows as code spans (mdCode).
	code []string
}

type chart struct {
	name   string
	title  string
	points []Point
}

// render writes v as JSON, or d in the other formats.
func render(w io.Writer, f Format, v any, d *document) error {
	var b bytes.Buffer
	switch f {
	case JSON:
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("render json: %w", err)
		}
	case Markdown:
		d.markdown(&b)
	case HTML:
		if err := d.html(&b); err != nil {
			return err
		}
	case CSV:
		if err := d.csv(&b); err != nil {
			return err
		}
	default:
		return fmt.Errorf("render: unknown format %d", f)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// Markdown.

func (d *document) markdown(b *bytes.Buffer) {
	fmt.Fprintf(b, "# %s\n\n", mdEscape(d.title))
	for _, kv := range d.meta {
		fmt.Fprintf(b, "- **%s:** %s\n", mdEscape(kv[0]), mdEscape(kv[1]))
	}
	b.WriteString("\n")
	for _, w := range d.warnings {
		fmt.Fprintf(b, "> **Warning:** %s\n\n", mdEscape(w))
	}
	for _, s := range d.sections {
		h := "##"
		if s.sub {
			h = "###"
		}
		fmt.Fprintf(b, "%s %s\n\n", h, mdEscape(s.title))
		for _, t := range s.text {
			fmt.Fprintf(b, "%s\n\n", mdEscape(t))
		}
		for _, c := range s.charts {
			fmt.Fprintf(b, "%s (%d points, %s to %s; each line on its own scale, a blank where windows are missing):\n\n", mdEscape(c.title), len(c.points), stamp(first(c.points).Start), stamp(last(c.points).End))
			fmt.Fprintf(b, "    requests   %s\n    refused    %s\n    challenged %s\n\n",
				spark(c.points, func(p Point) uint64 { return p.Requests }, 0),
				spark(c.points, func(p Point) uint64 { return p.Refused }, 0),
				spark(c.points, func(p Point) uint64 { return p.Challenged }, 0))
		}
		for _, t := range s.tables {
			switch {
			case len(t.rows) == 0 && t.title != "":
				fmt.Fprintf(b, "**%s:** none.\n\n", mdEscape(t.title))
				continue
			case len(t.rows) == 0:
				b.WriteString("None.\n\n")
				continue
			case t.title != "":
				fmt.Fprintf(b, "**%s:**\n\n", mdEscape(t.title))
			}
			row := func(cells []string, head bool) {
				b.WriteString("|")
				for i, c := range cells {
					if !head && slices.Contains(t.code, t.cols[i]) {
						c = mdCode(c)
					} else {
						c = mdEscape(c)
					}
					b.WriteString(" " + c + " |")
				}
				b.WriteString("\n")
			}
			row(t.cols, true)
			b.WriteString("|")
			for range t.cols {
				b.WriteString(" --- |")
			}
			b.WriteString("\n")
			for _, r := range t.rows {
				row(r, false)
			}
			b.WriteString("\n")
		}
	}
}

// mdEscape makes s plain text in Markdown: every character that could
// start markup (emphasis, links, HTML, tables, headings) is escaped, and
// line breaks, control and format characters become spaces (plain), so
// that a hostile user id or path renders as itself and cannot break the
// table it is in.
func mdEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case visible.Hidden(r):
			b.WriteByte(' ')
		case strings.ContainsRune("\\`*_{}[]<>()#+!|~&", r):
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdCode returns s as a code span of a Markdown table's cell: shown as it
// is, and not read as text, where GitHub turns @name into a mention,
// #123 into an issue link and a bare URL into a link, escaped or not.
// Hidden characters are spaces (plain). By CommonMark's rules the fence
// is one backtick longer than the longest run of backticks in s, and s
// gets a space at each end when it starts or ends with a backtick (which
// would join the fence) or starts and ends with a space (one of which,
// at each end, CommonMark strips); a pipe is \|, as a GFM table wants it
// even in code. "" stays "": an empty code span would show its fence.
func mdCode(s string) string {
	s = plain(s)
	if s == "" {
		return ""
	}
	longest, run := 0, 0
	for i := range len(s) {
		if s[i] != '`' {
			run = 0
			continue
		}
		run++
		longest = max(longest, run)
	}
	if s[0] == '`' || s[len(s)-1] == '`' || s[0] == ' ' && s[len(s)-1] == ' ' && strings.Trim(s, " ") != "" {
		s = " " + s + " "
	}
	fence := strings.Repeat("`", longest+1)
	return fence + strings.ReplaceAll(s, "|", `\|`) + fence
}

// plain returns s with every hidden character (visible.Hidden: a control
// or format character, a line or paragraph separator) a space, as the
// reports show them in every format but JSON: such a character would
// break a row, reach a terminal, or be obeyed and not drawn by a viewer
// ("\u202enimda" shown as "admin"). A user id or a path is the client's
// choice; as spaces, such characters are seen and do nothing.
func plain(s string) string {
	return strings.Map(func(r rune) rune {
		if visible.Hidden(r) {
			return ' '
		}
		return r
	}, s)
}

// plainAll returns ss, each plain, in a new slice.
func plainAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = plain(s)
	}
	return out
}

const sparkRunes = "▁▂▃▄▅▆▇█"

// spark draws v of each point as a block of eight heights, scaled to top
// (to the series' own maximum when top is 0); a point with missing windows
// and no value is a space.
func spark(ps []Point, v func(Point) uint64, top uint64) string {
	if top == 0 {
		for _, p := range ps {
			top = max(top, v(p))
		}
	}
	blocks := []rune(sparkRunes)
	var b strings.Builder
	for _, p := range ps {
		n := v(p)
		switch {
		case n == 0 && p.Missing > 0:
			b.WriteByte(' ')
		case top == 0:
			b.WriteRune(blocks[0])
		default:
			b.WriteRune(blocks[min(len(blocks)-1, int(n*uint64(len(blocks)-1)/top))])
		}
	}
	return b.String()
}

func maxOf(ps []Point) uint64 {
	var m uint64
	for _, p := range ps {
		m = max(m, p.Requests)
	}
	return m
}

func first(ps []Point) Point {
	if len(ps) == 0 {
		return Point{}
	}
	return ps[0]
}

func last(ps []Point) Point {
	if len(ps) == 0 {
		return Point{}
	}
	return ps[len(ps)-1]
}

// HTML.

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f3f3f3}
.warn{background:#fff3cd;border:1px solid #e0c060;padding:.5em 1em}
svg{display:block;margin:.5em 0 1.5em}
svg text{font:11px system-ui,sans-serif;fill:#444}
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<ul>{{range .Meta}}<li><b>{{index . 0}}:</b> {{index . 1}}</li>{{end}}</ul>
{{range .Warnings}}<p class="warn"><b>Warning:</b> {{.}}</p>
{{end}}{{range .Sections}}{{if .Sub}}<h3>{{.Title}}</h3>{{else}}<h2>{{.Title}}</h2>{{end}}
{{range .Text}}<p>{{.}}</p>
{{end}}{{range .Charts}}{{.}}
{{end}}{{range .Tables}}{{if .Rows}}{{if .Title}}<p><b>{{.Title}}:</b></p>
{{end}}<table>
<tr>{{range .Cols}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}{{if .N}}<td class="n">{{.S}}</td>{{else}}<td>{{.S}}</td>{{end}}{{end}}</tr>
{{end}}</table>
{{else if .Title}}<p><b>{{.Title}}:</b> none.</p>
{{else}}<p>None.</p>
{{end}}{{end}}{{end}}</body>
</html>
`))

type htmlCell struct {
	S string
	N bool
}

// html writes d as one HTML page; every string of d is plain.
func (d *document) html(b *bytes.Buffer) error {
	type htmlTable struct {
		Title string
		Cols  []string
		Rows  [][]htmlCell
	}
	type htmlSection struct {
		Title  string
		Sub    bool
		Text   []string
		Charts []template.HTML
		Tables []htmlTable
	}
	v := struct {
		Title    string
		Meta     [][2]string
		Warnings []string
		Sections []htmlSection
	}{Title: plain(d.title), Meta: make([][2]string, len(d.meta)), Warnings: plainAll(d.warnings)}
	for i, kv := range d.meta {
		v.Meta[i] = [2]string{plain(kv[0]), plain(kv[1])}
	}
	for _, s := range d.sections {
		hs := htmlSection{Title: plain(s.title), Sub: s.sub, Text: plainAll(s.text)}
		for _, c := range s.charts {
			hs.Charts = append(hs.Charts, svgChart(c))
		}
		for _, t := range s.tables {
			ht := htmlTable{Title: plain(t.title), Cols: plainAll(t.cols)}
			for _, r := range t.rows {
				cells := make([]htmlCell, len(r))
				for i, c := range r {
					cells[i] = htmlCell{S: plain(c), N: isNumber(c)}
				}
				ht.Rows = append(ht.Rows, cells)
			}
			hs.Tables = append(hs.Tables, ht)
		}
		v.Sections = append(v.Sections, hs)
	}
	if err := page.Execute(b, v); err != nil {
		return fmt.Errorf("render html: %w", err)
	}
	return nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(strings.TrimSuffix(s, " %"), 64)
	return err == nil
}

// CSV.

// csv writes every table as records of the table's name, "header" or
// "row", then the cells; the header and meta first, as table "meta". The
// cells are plain, as in the other formats.
func (d *document) csv(b *bytes.Buffer) error {
	w := csv.NewWriter(b)
	rec := func(fields ...string) {
		for i := 2; i < len(fields); i++ {
			fields[i] = plain(csvSafe(fields[i]))
		}
		w.Write(fields)
	}
	rec("meta", "header", "key", "value")
	rec("meta", "row", "title", d.title)
	for _, kv := range d.meta {
		rec("meta", "row", kv[0], kv[1])
	}
	for _, warn := range d.warnings {
		rec("meta", "row", "warning", warn)
	}
	for _, s := range d.sections {
		for _, c := range s.charts {
			rec(append([]string{c.name, "header"}, trendCols...)...)
			for _, p := range c.points {
				rec(append([]string{c.name, "row"}, trendRow(p)...)...)
			}
		}
		for _, t := range s.tables {
			rec(append([]string{t.name, "header"}, t.cols...)...)
			for _, r := range t.rows {
				rec(append([]string{t.name, "row"}, r...)...)
			}
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("render csv: %w", err)
	}
	return nil
}

var trendCols = []string{"start", "end", "requests", "refused", "challenged", "windows_missing"}

func trendRow(p Point) []string {
	return []string{stamp(p.Start), stamp(p.End), u(p.Requests), u(p.Refused), u(p.Challenged), strconv.Itoa(p.Missing)}
}

// csvSafe keeps a spreadsheet from reading a cell as a formula: a cell
// that starts with = + - @ or a tab or carriage return, and is not a
// number, gets a leading apostrophe. User ids and paths are the client's.
// A lone "-", the reports' own "no value", is no formula and stays as it
// is: quoted, every such cell read "'-".
func csvSafe(s string) string {
	if s == "" || s == "-" || !strings.ContainsRune("=+-@\t\r", rune(s[0])) || isNumber(s) {
		return s
	}
	return "'" + s
}

// Cells.

func u(n uint64) string { return strconv.FormatUint(n, 10) }

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func rate(r *float64) string {
	if r == nil {
		return "-"
	}
	return strconv.FormatFloat(*r*100, 'f', 1, 64) + " %"
}

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + " ms" }
