package assemble

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/identity"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// Inputs are what a configuration names outside itself, read and checked:
// keys and secrets in environment variables, key files and list files.
type Inputs struct {
	Keys           *challenge.Keyring // nil: no challenges, or no keys to pass them with
	VerifierSecret string             // "": the token endpoint is closed
	// Warnings are what starts but is most likely a mistake, one sentence
	// each: trusted proxy ranges that are too wide, challenges without keys,
	// list entries that hold a NAT64 prefix of identity.nat64_prefixes.
	Warnings []string
}

// ReadInputs reads and checks everything cfg names outside itself: the
// privacy key, the JWT key (environment variable or PEM file), the allow
// and deny list files, the challenge keys and the verifier secret (at least
// edge.MinVerifierSecretLen bytes). Its error joins every problem found;
// the warnings are there even then.
// NewEdge starts from what it returns and `ratewarden config check` runs
// it, so the check fails on exactly what keeps the edge from starting
// (short of the network, the listen address and the decision log).
func ReadInputs(cfg *config.Config, getenv func(string) string) (*Inputs, error) {
	in := &Inputs{}
	for _, w := range cfg.Warnings() {
		in.Warnings = append(in.Warnings, w.Error())
	}
	warn := func(w string) {
		if f := cfg.File(); f != "" {
			w = f + ": " + w
		}
		in.Warnings = append(in.Warnings, w)
	}
	var errs []error
	if _, err := newPrivacy(cfg.Decisions.Privacy, getenv); err != nil {
		errs = append(errs, err)
	}
	if _, err := identity.New(cfg.Identity, getenv); err != nil {
		errs = append(errs, err)
	}
	nat := cfg.Identity.NAT64()
	for _, l := range []struct{ key, path string }{{"lists.allow_file", cfg.Lists.AllowFile}, {"lists.deny_file", cfg.Lists.DenyFile}, {"lists.challenge_file", cfg.Lists.ChallengeFile}} {
		if l.path == "" {
			continue
		}
		// Every ≤ 0 polls nothing: one load, as at start-up.
		w, err := lists.WatchSource(lists.NewFileSource(l.path), lists.WatchOptions{NAT64: nat,
			Wide: func(e lists.WideEntry) { warn(l.key + ": " + l.path + ": " + e.String()) }})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.key, err))
			continue
		}
		w.Close(context.Background())
	}
	if cfg.Challenge.Enabled {
		ch := cfg.Challenge
		raw := getenv(ch.KeysEnv)
		switch keys, err := challenge.ParseKeys(raw); {
		case raw == "":
			warn("challenge.keys_env: " + ch.KeysEnv + " is not set: challenged clients are redirected, but no token can pass them")
		case err != nil:
			errs = append(errs, fmt.Errorf("challenge.keys_env: %s: %w", ch.KeysEnv, err))
		default:
			in.Keys = keys
		}
		in.VerifierSecret = getenv(ch.VerifierSecretEnv)
		switch err := edge.CheckVerifierSecret(in.VerifierSecret); {
		case in.VerifierSecret == "":
			warn("challenge.verifier_secret_env: " + ch.VerifierSecretEnv + " is not set: the token endpoint is closed")
		case err != nil:
			errs = append(errs, fmt.Errorf("challenge.verifier_secret_env: %s: %w", ch.VerifierSecretEnv, err))
		}
	}
	return in, errors.Join(errs...)
}
