package main

import (
	"fmt"
	"io"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
)

// checkError reports that configuration files failed validation; their
// errors have been printed already.
type checkError struct{ bad, total int }

func (e *checkError) Error() string {
	return fmt.Sprintf("%d of %d configuration files are invalid", e.bad, e.total)
}

const configUsage = `Usage: ratewarden config check FILE...

Validate configuration files: every error names file:line, key, value and
what is allowed. What the configuration names outside itself is read and
checked as ` + "`ratewarden edge`" + ` would at start-up, with this environment:
key and list files, keys and secrets in environment variables; anything
that would keep the edge from starting fails the check. What starts but is
most likely a mistake, such as a trusted proxy range that takes in every
address, is printed as a warning and does not fail it.
`

func runConfig(args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || args[0] != "check" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, configUsage)
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
		in, err := assemble.ReadInputs(cfg, getenv)
		for _, w := range in.Warnings {
			fmt.Fprintln(stderr, "warning:", w)
		}
		if err != nil {
			bad++
			fmt.Fprintf(stderr, "%s: edge would not start:\n%v\n", path, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (%d tiers)\n", path, len(cfg.Tiers))
	}
	if bad > 0 {
		return &checkError{bad: bad, total: fs.NArg()}
	}
	return nil
}
