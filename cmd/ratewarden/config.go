package main

import (
	"fmt"
	"io"

	"github.com/ratewarden/ratewarden/edge/config"
)

// checkError reports that configuration files failed validation; their
// errors have been printed already.
type checkError struct{ bad, total int }

func (e *checkError) Error() string {
	return fmt.Sprintf("%d of %d configuration files are invalid", e.bad, e.total)
}

func runConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, "Usage: ratewarden config check FILE...\n\nValidate configuration files: every error names file:line, key, value and what is allowed.\n")
			return nil
		}
		fmt.Fprint(stderr, "Usage: ratewarden config check FILE...\n")
		return errUsage
	}
	fs := newFlags("config check", "config check FILE...", stderr)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	bad := 0
	for _, path := range fs.Args() {
		cfg, err := config.Load(path)
		if err != nil {
			bad++
			fmt.Fprintln(stderr, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (%d tiers)\n", path, len(cfg.Tiers))
	}
	if bad > 0 {
		return &checkError{bad: bad, total: fs.NArg()}
	}
	return nil
}
