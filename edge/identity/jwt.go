package identity

import (
	"crypto/elliptic"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratewarden/ratewarden/config"
)

// Key size floors. RFC 7518 section 3.2 requires an HS256 key of at least
// the hash size; RSA keys below 2048 bits are no longer considered safe.
const (
	minHMACKeyLen = 32
	minRSABits    = 2048
)

// verifier verifies bearer tokens with one algorithm and one key. It is
// immutable after newVerifier and safe for concurrent use.
type verifier struct {
	method    jwt.SigningMethod
	key       any
	userClaim string
	planClaim string
	opts      []jwt.ParserOption // every option but the clock, which is per call
}

func newVerifier(cfg config.JWT, env func(string) string) (*verifier, error) {
	v := &verifier{
		userClaim: cfg.UserClaim,
		planClaim: cfg.PlanClaim,
	}
	if v.userClaim == "" {
		v.userClaim = DefaultUserClaim
	}
	if v.planClaim == "" {
		v.planClaim = DefaultPlanClaim
	}
	if v.userClaim == v.planClaim {
		return nil, fmt.Errorf("identity.jwt.plan_claim: %q is also the user claim; want a different claim", v.planClaim)
	}
	leeway := DefaultLeeway
	if cfg.Leeway != nil {
		leeway = *cfg.Leeway
	}
	if leeway < 0 {
		return nil, fmt.Errorf("identity.jwt.leeway: %v is negative; want a duration ≥ 0 (default %v)", leeway, DefaultLeeway)
	}

	switch alg := strings.ToUpper(strings.TrimSpace(cfg.Algorithm)); alg {
	case "HS256":
		if cfg.KeyEnv == "" {
			return nil, errors.New("identity.jwt.key_env: empty; HS256 needs the name of the environment variable holding the key")
		}
		key := env(cfg.KeyEnv)
		if len(key) < minHMACKeyLen {
			return nil, fmt.Errorf("identity.jwt.key_env: the key in $%s is %d bytes; HS256 needs at least %d", cfg.KeyEnv, len(key), minHMACKeyLen)
		}
		v.method, v.key = jwt.SigningMethodHS256, []byte(key)
	case "RS256":
		pemBytes, err := readKeyFile(cfg.PublicKeyFile, alg)
		if err != nil {
			return nil, err
		}
		k, err := jwt.ParseRSAPublicKeyFromPEM(pemBytes)
		if err != nil {
			return nil, fmt.Errorf("identity.jwt.public_key_file: %s: not a PEM RSA public key: %w", cfg.PublicKeyFile, err)
		}
		if k.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("identity.jwt.public_key_file: %s: RSA key of %d bits; want at least %d", cfg.PublicKeyFile, k.N.BitLen(), minRSABits)
		}
		v.method, v.key = jwt.SigningMethodRS256, k
	case "ES256":
		pemBytes, err := readKeyFile(cfg.PublicKeyFile, alg)
		if err != nil {
			return nil, err
		}
		k, err := jwt.ParseECPublicKeyFromPEM(pemBytes)
		if err != nil {
			return nil, fmt.Errorf("identity.jwt.public_key_file: %s: not a PEM ECDSA public key: %w", cfg.PublicKeyFile, err)
		}
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("identity.jwt.public_key_file: %s: ECDSA key on %s; ES256 needs P-256", cfg.PublicKeyFile, k.Curve.Params().Name)
		}
		v.method, v.key = jwt.SigningMethodES256, k
	default:
		return nil, fmt.Errorf("identity.jwt.algorithm: %q is not supported; want HS256, RS256 or ES256", cfg.Algorithm)
	}

	v.opts = []jwt.ParserOption{
		jwt.WithValidMethods([]string{v.method.Alg()}),
		jwt.WithLeeway(leeway),
		jwt.WithStrictDecoding(),
	}
	if cfg.RequireExp == nil || *cfg.RequireExp {
		v.opts = append(v.opts, jwt.WithExpirationRequired())
	}
	if cfg.Issuer != "" {
		v.opts = append(v.opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		v.opts = append(v.opts, jwt.WithAudience(cfg.Audience))
	}
	return v, nil
}

func readKeyFile(path, alg string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("identity.jwt.public_key_file: empty; %s needs a PEM public key file", alg)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity.jwt.public_key_file: %w", err)
	}
	return b, nil
}

// verify checks tok's signature and algorithm (the configured one only);
// at now, give or take the leeway, exp (required unless require_exp is
// false) and nbf (when present); iss and aud when configured; and returns
// the user and plan claims. iat is not checked. A token whose user claim
// is missing or not a string, or whose plan claim is present but not a
// string, or whose user and plan Believes refuses, is not accepted.
func (v *verifier) verify(tok string, now time.Time) (user, plan string, ok bool) {
	if tok == "" || len(tok) > MaxTokenLen {
		return "", "", false
	}
	opts := append(v.opts[:len(v.opts):len(v.opts)], jwt.WithTimeFunc(func() time.Time { return now }))
	claims := jwt.MapClaims{}
	t, err := jwt.NewParser(opts...).ParseWithClaims(tok, claims, v.keyFunc)
	if err != nil || t == nil || !t.Valid {
		return "", "", false
	}
	user, ok = claims[v.userClaim].(string)
	if !ok {
		return "", "", false
	}
	switch p := claims[v.planClaim].(type) {
	case nil:
	case string:
		plan = p
	default:
		return "", "", false
	}
	return user, plan, Believes(user, plan)
}

// keyFunc returns the one configured key. WithValidMethods already refuses
// other algorithms; the check here keeps the key from ever meeting another
// method should that option be lost.
func (v *verifier) keyFunc(t *jwt.Token) (any, error) {
	if t.Method == nil || t.Method.Alg() != v.method.Alg() {
		return nil, errors.New("unexpected signing method")
	}
	return v.key, nil
}
