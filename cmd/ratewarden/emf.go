package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

const emfUsage = `Usage: ratewarden emf validate [flags] FILE...

Validate CloudWatch Embedded Metric Format documents, one per line. Every
violation of the specification is printed as FILE:LINE: PATH: PROBLEM;
allowed: WHAT. Blank lines are skipped. Exit 1 if any document is invalid.
`

// emfError reports that documents failed validation; their violations have
// been printed already.
type emfError struct{ bad, total int }

func (e *emfError) Error() string {
	return fmt.Sprintf("%d of %d EMF documents are invalid", e.bad, e.total)
}

func runEmf(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "validate" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, emfUsage)
			return nil
		}
		fmt.Fprint(stderr, emfUsage)
		return errUsage
	}
	fs := newFlags("emf validate", "emf validate [flags] FILE...", stderr)
	nowFlag := fs.String("now", "", "validate timestamps as of `T`, an RFC 3339 time (default: the current time)")
	ignoreTime := fs.Bool("ignore-time", false, "skip the check that timestamps lie from 14 days before to 2 hours after now")
	maxSize := fs.Int("max-size", int(emf.DefaultMaxDocumentSize), "largest document allowed (`bytes`, at most 1048576)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	now := time.Now()
	if *nowFlag != "" {
		t, err := time.Parse(time.RFC3339Nano, *nowFlag)
		if err != nil {
			fmt.Fprintf(stderr, "ratewarden emf validate: -now %q is not an RFC 3339 time\n", *nowFlag)
			return errUsage
		}
		now = t
	}
	if *maxSize < 1 || emf.ByteSize(*maxSize) > emf.MaxDocumentSize {
		fmt.Fprintf(stderr, "ratewarden emf validate: -max-size %d is not allowed; use 1 to %d\n", *maxSize, emf.MaxDocumentSize)
		return errUsage
	}
	opts := emf.ValidateOptions{MaxSize: emf.ByteSize(*maxSize), IgnoreTimestampWindow: *ignoreTime}
	bad, total := 0, 0
	for _, path := range fs.Args() {
		b, n, err := validateEmfFile(path, now, opts, stdout, stderr)
		if err != nil {
			return err
		}
		bad += b
		total += n
	}
	if bad > 0 {
		return &emfError{bad: bad, total: total}
	}
	fmt.Fprintf(stdout, "%d EMF documents are valid\n", total)
	return nil
}

// validateEmfFile validates each line of path; it returns the number of
// bad documents and of documents.
func validateEmfFile(path string, now time.Time, opts emf.ValidateOptions, stdout, stderr io.Writer) (bad, total int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("validate emf file: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for line := 1; ; line++ {
		doc, rerr := r.ReadBytes('\n')
		if rerr != nil && rerr != io.EOF {
			return bad, total, fmt.Errorf("validate emf file: %s:%d: %w", path, line, rerr)
		}
		doc = bytes.TrimRight(doc, "\r\n")
		if len(bytes.TrimSpace(doc)) > 0 {
			total++
			if vs := emf.Validate(doc, now, opts); len(vs) > 0 {
				bad++
				for _, v := range vs {
					fmt.Fprintf(stderr, "%s:%d: %s\n", path, line, v)
				}
			}
		}
		if rerr == io.EOF {
			return bad, total, nil
		}
	}
}
