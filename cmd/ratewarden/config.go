package main

import (
	"errors"
	"flag"
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

// flagKeys are the configuration keys that the flags of edge, serve, rls,
// authz and lambda override, by flag name; --listen's is the command's own.
var flagKeys = map[string]string{
	"upstream":          "edge.upstream",
	"admin-listen":      "edge.admin_listen",
	"decisions-file":    "edge.decisions_file",
	"decisions-dir":     "decisions.dir",
	"node":              "edge.node",
	"kinesis-stream":    "decisions.kinesis.stream",
	"kinesis-spill-dir": "decisions.kinesis.spill_dir",
	"dashboard-listen":  "serve.dashboard.listen",
	"state-dir":         "serve.state_dir",
	"partials-dir":      "serve.partials_dir",
}

// checkOverrides validates cfg once the flags of fs have overridden its
// keys (flagKeys; listenKey for --listen). A problem with a key a flag set
// is the flag's: exit 2, naming the flag and its value, where the file's
// error would name the line of the value the flag replaced. The upstream
// builtin, which only a flag names, is the demo origin, not a URL; the
// rest of a configuration with it is validated all the same, so that no
// flag bypasses the checks of the key it sets.
func checkOverrides(cfg *config.Config, fs *flag.FlagSet, listenKey string) error {
	err := cfg.Validate()
	var list config.ErrorList
	if !errors.As(err, &list) {
		return err
	}
	flags := make(map[string]string) // key → flag
	fs.Visit(func(f *flag.Flag) {
		key := flagKeys[f.Name]
		if f.Name == "listen" {
			key = listenKey
		}
		if key != "" && f.Value.String() != "" { // an empty value overrides nothing
			flags[key] = f.Name
		}
	})
	var rest config.ErrorList
	for _, e := range list {
		if e.Key == "edge.upstream" && e.Value == assemble.BuiltinUpstream {
			continue
		}
		if name, ok := flags[e.Key]; ok {
			msg := fmt.Sprintf("--%s %q: %s", name, e.Value, e.Problem)
			if e.Allowed != "" {
				msg += "; use " + e.Allowed
			}
			return badFlag(errors.New(msg))
		}
		rest = append(rest, e)
	}
	if len(rest) == 0 {
		return nil
	}
	return rest
}
