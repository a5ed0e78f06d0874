package config

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// MaxErrors bounds how many errors one ErrorList reports; further errors are
// summarised in a last entry that only counts them.
const MaxErrors = 20

// Error is one problem in a configuration. It renders as
//
//	seed.yaml:14: tiers.anonymous.paths./api/reports.algorithm: "leaky" is not allowed; use one of fixed_window, sliding_window, token_bucket, concurrency
type Error struct {
	File    string // the file name given to Parse or Load; "" for a configuration built in code
	Line    int    // 1-based line of the offending key; 0 when unknown
	Key     string // key path, such as tiers.anonymous.paths./api/reports.limit; "" for a file-level problem
	Value   string // the value found, as written or as decoded; "" when there is none (a missing or unknown key)
	Problem string // what is wrong, such as "is not allowed" or "unknown key"
	Allowed string // what is allowed, read after "use": "one of memory", "1s to 24h"; may be ""
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	if e.Value != "" {
		b.WriteString(strconv.Quote(e.Value))
		b.WriteByte(' ')
	}
	b.WriteString(e.Problem)
	if e.Allowed != "" {
		b.WriteString("; use ")
		b.WriteString(e.Allowed)
	}
	return b.String()
}

// ErrorList is every problem found in one configuration, ordered by line,
// at most MaxErrors of them plus a last entry counting the rest. Parse, Load
// and Validate return it as their error; use errors.As to inspect it.
type ErrorList []*Error

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the errors in the list, so that errors.As finds an *Error.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// maxCollected bounds the errors kept while collecting, before sorting and
// cutting to MaxErrors; beyond it errors are only counted.
const maxCollected = 1000

// collector gathers errors for one file. The zero value is not usable; it
// needs the file name.
type collector struct {
	file    string
	errs    []*Error
	dropped int
}

func (c *collector) add(e *Error) {
	if len(c.errs) >= maxCollected {
		c.dropped++
		return
	}
	e.File = c.file
	c.errs = append(c.errs, e)
}

// err returns the collected errors sorted by line and cut to MaxErrors, or
// nil when there are none.
func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(c.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), strings.Compare(a.Key, b.Key))
	})
	list := ErrorList(c.errs)
	more := c.dropped
	if len(list) > MaxErrors {
		more += len(list) - MaxErrors
		list = list[:MaxErrors:MaxErrors]
	}
	if more > 0 {
		list = append(list, &Error{File: c.file, Problem: strconv.Itoa(more) + " more errors not shown"})
	}
	return list
}
