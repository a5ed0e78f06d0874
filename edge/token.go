package edge

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/limit"
)

// MinVerifierSecretLen is the shortest verifier secret the token endpoint
// accepts: 32 bytes, as for the HMAC keys, so that the secret cannot be
// guessed within the limit of wrong secrets.
const MinVerifierSecretLen = 32

// CheckVerifierSecret reports whether secret may open the token endpoint.
// The error does not hold the secret.
func CheckVerifierSecret(secret string) error {
	if len(secret) < MinVerifierSecretLen {
		return errors.New("verifier secret of " + strconv.Itoa(len(secret)) + " bytes: want at least " +
			strconv.Itoa(MinVerifierSecretLen) + ", such as the output of: head -c32 /dev/urandom | base64")
	}
	return nil
}

// tokenRuleID names the token endpoint's rule in decisions, headers and
// counter keys. It has no colon, so no tier's rule has it.
const tokenRuleID = "token_endpoint"

// The reasons of the token endpoint's decisions, each after tokenReason.
// None holds anything the client sent.
const (
	tokenReason          = "token endpoint: "
	reasonNoSecret       = tokenReason + "no verifier secret"
	reasonWrongSecret    = tokenReason + "wrong verifier secret"
	reasonTokenIssued    = tokenReason + "token issued"
	reasonTokenBadMethod = tokenReason + "method not allowed"
	reasonTokenBadBody   = tokenReason + "bad request"
)

// compileTokenRule compiles the limit of wrong verifier secrets per client
// address: a sliding window, never challenged, never shadowed.
func compileTokenRule(cfg *config.Config) (*rule, error) {
	f := cfg.Challenge.EndpointFailures
	return compileRule(cfg, tokenRuleID, &config.Rule{Limit: f.Limit, Window: f.Window,
		Algorithm: limit.SlidingWindow.String(), Challenge: new(false)})
}

// tokenAttempt counts a request to the token endpoint at now against the
// limit of wrong secrets of the address it comes from, before the secret
// is looked at, so that no more secrets are tried than the limit allows,
// however many arrive at once. It fills v; when the request may go on it
// returns true, and the caller gives the hit back (giveBack) unless the
// secret was wrong, then finishes v. Otherwise v is finished, refused.
func (l *Limiter) tokenAttempt(ctx context.Context, now time.Time, r *Request, v *Verdict) bool {
	*v = Verdict{uri: r.URI}
	id := l.ident.ResolveAddr(r.RemoteAddr, r.Header)
	d := &v.Decision
	d.Time, d.RequestID, d.Node = now, r.RequestID, l.node
	d.ClientIP, d.IdentitySource = id.ClientIP, id.Source
	d.Method, d.Host, d.Path = r.Method, r.Host, r.Path

	var e eval
	var sc storeCtx
	l.evaluate(ctx, &sc, now, &limit.Key{Addr: id.Addr}, l.tokenRule, r.Path, 1, &e)
	sc.done()
	ru := e.rule
	d.StoreLatency = e.lat
	d.Rule, d.Algorithm, d.Limit, d.Window = ru.id, ru.algorithm, ru.capacity, window(ru)
	d.Count, d.Remaining, d.Reset = e.res.Count, e.res.Remaining, e.res.Reset
	v.Policies[0] = Policy{Name: ru.id, Limit: ru.capacity, Window: window(ru), Remaining: e.res.Remaining, Reset: e.res.Reset}
	outcome, reason := l.outcome(&e, r, &id, now)
	if !outcome.Passed() {
		v.RetryAfter = ru.limit.RetryAfter(e.res)
		if outcome == decisions.FailClosed {
			v.RetryAfter = l.cfg.Store.Breaker.Cooldown
		}
		if outcome == decisions.Block || outcome == decisions.LocalLimit {
			reason = "over the limit of wrong verifier secrets"
		}
		l.finish(v, outcome, tokenReason+reason)
		return false
	}
	if e.acquired() {
		k := limit.Key{Rule: ru.id, Addr: id.Addr}
		v.held[0] = held{rule: ru, key: k, fall: e.fall == 3}
	}
	v.Outcome = outcome
	return true
}

// tokenDone records what the token endpoint did with a request that
// tokenAttempt let through: a wrong secret keeps its hit, anything else
// gives it back.
func (l *Limiter) tokenDone(ctx context.Context, now time.Time, v *Verdict, reason string) {
	if reason != reasonWrongSecret && reason != reasonNoSecret {
		l.release(ctx, now, v)
	}
	v.held = [2]held{}
	l.finish(v, v.Outcome, reason)
}
