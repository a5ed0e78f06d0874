package main

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/identity"
)

func runToken(args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || args[0] != "issue" {
		fmt.Fprint(stderr, "Usage: ratewarden token issue (--ip ADDR | --user ID) [--ttl DURATION] [--config FILE]\n")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return errUsage
	}
	fs := newFlags("token issue", "token issue (--ip ADDR | --user ID) [--ttl DURATION] [--config FILE]", stderr)
	ip := fs.String("ip", "", "client `address` the token is bound to")
	user := fs.String("user", "", "user `id` the token is bound to")
	ttl := fs.Duration("ttl", 0, "token lifetime (default challenge.token_ttl)")
	cfgPath := fs.String("config", "", "configuration `file` (default: the built-in seed configuration)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if (*ip == "") == (*user == "") || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "ratewarden token issue: give exactly one of --ip or --user")
		return errUsage
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	raw := getenv(cfg.Challenge.KeysEnv)
	if raw == "" {
		return fmt.Errorf("issue token: %s is not set (want \"kid:base64key,...\")", cfg.Challenge.KeysEnv)
	}
	keys, err := challenge.ParseKeys(raw)
	if err != nil {
		return fmt.Errorf("issue token: %s: %w", cfg.Challenge.KeysEnv, err)
	}
	if *ttl == 0 {
		*ttl = cfg.Challenge.TokenTTL
	}
	if *ttl <= 0 || *ttl > 24*time.Hour {
		return badFlag(fmt.Errorf("issue token: --ttl %s: want a duration from 1s to 24h", *ttl))
	}
	var addr netip.Addr
	if *ip != "" {
		if addr, err = netip.ParseAddr(*ip); err != nil {
			return badFlag(fmt.Errorf("issue token: --ip: %w", err))
		}
		addr = identity.CountingAddr(cfg.Identity.NAT64().Of(addr), cfg.Identity.IPv6Prefix)
	}
	fmt.Fprintln(stdout, keys.Issue(challenge.Subject(addr, *user), time.Now(), *ttl))
	return nil
}
