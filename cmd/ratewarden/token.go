package main

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
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
	ttl := fs.Duration("ttl", 0, "token lifetime, 1s to 24h (default challenge.token_ttl)")
	cfgPath := fs.String("config", "", "configuration `file` (default: the built-in seed configuration)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if (*ip == "") == (*user == "") || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "ratewarden token issue: give exactly one of --ip or --user")
		return errUsage
	}
	// The flags are checked before the configuration and the keys are
	// read: a token the edge would not honour as issued is a bad flag,
	// whatever else is wrong.
	if *user != "" {
		// The edge counts a client whose id it does not believe by its
		// address (identity.Believes), so a token for such an id would
		// never let anyone through.
		if err := decisions.CheckUserID(*user); err != nil {
			return badFlag(fmt.Errorf("issue token: --user %q: %v; want printable text of at most %d bytes, without white space at either end", *user, err, decisions.MaxUserIDLen))
		}
	}
	if flagSet(fs, "ttl") {
		if err := checkTokenTTL(*ttl); err != nil {
			return err
		}
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
	if !flagSet(fs, "ttl") {
		*ttl = cfg.Challenge.TokenTTL
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

// minTokenTTL is the shortest --ttl: a token expires at a whole second
// (challenge.Keyring.Issue), so a shorter one could be expired as issued.
const minTokenTTL = time.Second

// checkTokenTTL refuses a --ttl outside minTokenTTL to config.MaxTokenTTL,
// the longest challenge.token_ttl the configuration allows.
func checkTokenTTL(ttl time.Duration) error {
	if ttl < minTokenTTL || ttl > config.MaxTokenTTL {
		return badFlag(fmt.Errorf("issue token: --ttl %s: want a duration from %s to %dh", ttl, minTokenTTL, config.MaxTokenTTL/time.Hour))
	}
	return nil
}
