package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ratewarden/ratewarden/assemble"
)

const listsSynopsis = "lists show|add|remove|approve --config FILE [--list allow|deny|challenge] [TARGET] [--ttl D] [--reason TEXT] [--by NAME] [--pending] [--everyone] [--json]"

func runLists(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || !slices.Contains(assemble.ListsActions, args[0]) {
		fmt.Fprintf(stderr, "Usage: ratewarden %s\n  actions: %s\n", listsSynopsis, strings.Join(assemble.ListsActions, ", "))
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return errUsage
	}
	a := assemble.ListsAction{Action: args[0]}
	fs := newFlags("lists "+a.Action, listsSynopsis, stderr)
	cfgPath := fs.String("config", "", "configuration `file` naming the lists (lists.*_file or lists.table)")
	fs.StringVar(&a.List, "list", "", "the `list`: allow, deny or challenge")
	fs.DurationVar(&a.TTL, "ttl", 0, "add: how long the entry applies (default: until removed)")
	fs.StringVar(&a.Reason, "reason", "", "add, remove: why, for people (`text`)")
	fs.StringVar(&a.By, "by", getenv("USER"), "who makes the change (`name`)")
	fs.BoolVar(&a.Pending, "pending", false, "add: propose the entry; it applies once approved")
	fs.BoolVar(&a.Everyone, "everyone", false, "add: consent to a prefix holding every address of its family (0.0.0.0/0, ::/0), which is refused without it")
	fs.BoolVar(&a.JSON, "json", false, "show: print JSON")
	// The target may come before or after the flags.
	rest := args[1:]
	for {
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		if a.Target != "" {
			fmt.Fprintf(stderr, "ratewarden lists %s: one target at most, got %q and %q\n", a.Action, a.Target, fs.Arg(0))
			return errUsage
		}
		a.Target, rest = fs.Arg(0), fs.Args()[1:]
	}
	if *cfgPath == "" {
		fmt.Fprintf(stderr, "ratewarden lists %s: --config is required, to find the lists\n", a.Action)
		return errUsage
	}
	if err := a.Check(); err != nil {
		return badFlag(err)
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	return a.Run(ctx, cfg, nil, stdout)
}
