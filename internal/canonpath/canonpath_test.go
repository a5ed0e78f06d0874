package canonpath

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	long := "/" + strings.Repeat("a", MaxLen-1)
	for _, tc := range []struct {
		name, in, want string
		form           Form
		err            error
	}{
		// Canonical already: returned as they are.
		{"root", "/", "/", Canonical, nil},
		{"plain", "/api/reports", "/api/reports", Canonical, nil},
		{"trailing slash", "/api/admin/", "/api/admin/", Canonical, nil},
		{"upper case kept", "/API/Reports", "/API/Reports", Canonical, nil},
		{"sub-delims and params", "/a;v=1/b:c@d!$&'()*+,=", "/a;v=1/b:c@d!$&'()*+,=", Canonical, nil},
		{"encoded UTF-8", "/caf%C3%A9", "/caf%C3%A9", Canonical, nil},
		{"encoded reserved", "/a%3Bb%3F%23%25", "/a%3Bb%3F%23%25", Canonical, nil},
		{"longest", long, long, Canonical, nil},

		// The variants of issue 13 and the classes they stand for.
		{"repeated slash", "/api//reports", "/api/reports", Ambiguous, nil},
		{"leading repeated slash", "//api/reports", "/api/reports", Ambiguous, nil},
		{"many slashes", "///api///reports//", "/api/reports/", Ambiguous, nil},
		{"dot segment", "/api/./reports", "/api/reports", Ambiguous, nil},
		{"dot-dot segment", "/api/x/../reports", "/api/reports", Ambiguous, nil},
		{"encoded dot", "/api/%2e/reports", "/api/reports", Ambiguous, nil},
		{"encoded dot-dot", "/api/x/%2E%2e/reports", "/api/reports", Ambiguous, nil},
		{"half-encoded dot-dot", "/api/x/.%2e/reports", "/api/reports", Ambiguous, nil},
		{"backslash", `/api\reports`, "/api/reports", Ambiguous, nil},
		{"backslash dot-dot", `/api\x\..\admin`, "/api/admin", Ambiguous, nil},
		{"dot-dot above root", "/../../api/admin", "/api/admin", Ambiguous, nil},
		{"trailing dot", "/api/admin/.", "/api/admin/", Ambiguous, nil},
		{"trailing dot-dot", "/api/admin/x/..", "/api/admin/", Ambiguous, nil},
		{"only dots", "/./..", "/", Ambiguous, nil},
		{"encoded unreserved", "/api/%72eports", "/api/reports", Encoded, nil},
		{"encoded tilde and digit", "/%7Eu%31", "/~u1", Encoded, nil},
		{"lower-case hex", "/caf%c3%a9", "/caf%C3%A9", Encoded, nil},
		{"raw UTF-8", "/café", "/caf%C3%A9", Encoded, nil},
		{"raw space and brackets", "/a b[c]", "/a%20b%5Bc%5D", Encoded, nil},
		{"dot name is not a dot segment", "/.well-known/..x/...", "/.well-known/..x/...", Canonical, nil},
		{"encoded dot in a name", "/api/%2ereports", "/api/.reports", Encoded, nil},

		// What has no canonical form.
		{"empty", "", "", 0, ErrNotAbsolute},
		{"asterisk", "*", "", 0, ErrNotAbsolute},
		{"relative", "api/reports", "", 0, ErrNotAbsolute},
		{"absolute URL", "http://evil/api", "", 0, ErrNotAbsolute},
		{"too long", long + "a", "", 0, ErrTooLong},
		// Under MaxLen as sent, over it once each '#' is "%23": its
		// canonical form would not clean to itself (found by FuzzClean).
		{"too long once escaped", "/" + strings.Repeat("#", 2800), "", 0, ErrTooLong},
		{"longest once escaped", "/" + strings.Repeat("#", (MaxLen-1)/3), "/" + strings.Repeat("%23", (MaxLen-1)/3), Encoded, nil},
		{"encoded slash", "/api%2Freports", "", 0, ErrEncodedSlash},
		{"encoded slash lower", "/api%2freports", "", 0, ErrEncodedSlash},
		{"encoded backslash", "/api%5Creports", "", 0, ErrEncodedSlash},
		{"encoded NUL", "/api/reports%00.json", "", 0, ErrControl},
		{"raw NUL", "/api/reports\x00", "", 0, ErrControl},
		{"encoded newline", "/api%0a", "", 0, ErrControl},
		{"raw DEL", "/api\x7f", "", 0, ErrControl},
		{"double-encoded dot", "/api/%252e/reports", "", 0, ErrDoubleEncoding},
		{"double-encoded slash", "/api%252Freports", "", 0, ErrDoubleEncoding},
		{"double encoding assembled", "/api/%25%32%65", "", 0, ErrDoubleEncoding},
		{"short escape", "/api%2", "", 0, ErrBadEscape},
		{"escape at end", "/api%", "", 0, ErrBadEscape},
		{"non-hex escape", "/api%zz", "", 0, ErrBadEscape},
		{"IIS %u escape", "/api/%u002e%u002e/admin", "", 0, ErrBadEscape},
		{"overlong dot", "/api/%C0%AE%C0%AE/admin", "", 0, ErrInvalidUTF8},
		{"overlong slash", "/api%C0%AFadmin", "", 0, ErrInvalidUTF8},
		{"three-byte overlong", "/%E0%80%AE", "", 0, ErrInvalidUTF8},
		{"surrogate", "/%ED%A0%80", "", 0, ErrInvalidUTF8},
		{"above U+10FFFF", "/%F4%90%80%80", "", 0, ErrInvalidUTF8},
		{"lone continuation", "/%80", "", 0, ErrInvalidUTF8},
		{"truncated sequence", "/caf%C3/x", "", 0, ErrInvalidUTF8},
		{"raw invalid byte", "/\xff", "", 0, ErrInvalidUTF8},
		{"dot-dot with parameter", "/api/x/..;/admin", "", 0, ErrSegmentParam},
		{"dot with parameter", "/api/.;x/admin", "", 0, ErrSegmentParam},
		{"empty segment with parameter", "/;x/api/admin", "", 0, ErrSegmentParam},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, form, err := Clean(tc.in)
			if !errors.Is(err, tc.err) || got != tc.want || form != tc.form {
				t.Errorf("Clean(%q) = %q, %v, %v; want %q, %v, %v", tc.in, got, form, err, tc.want, tc.form, tc.err)
			}
		})
	}
}

func TestHasPrefix(t *testing.T) {
	for _, tc := range []struct {
		p, prefix string
		c         Case
		want      bool
	}{
		{"/api/reports", "/api/reports", Insensitive, true},
		{"/api/reports/2", "/api/reports", Insensitive, true},
		{"/api/report", "/api/reports", Insensitive, false},
		{"/API/Reports", "/api/reports", Insensitive, true},
		{"/API/Reports", "/api/reports", Sensitive, false},
		{"/api/admin", "/api/admin/", Insensitive, true},
		{"/api/admin", "/api/admin/", Sensitive, true},
		{"/api/adminx", "/api/admin/", Insensitive, false},
		{"/api/admi", "/api/admin/", Insensitive, false},
		{"/api/admin;jsessionid=1/users", "/api/admin/", Insensitive, true},
		{"/api;x/admin/users", "/api/admin/", Sensitive, true},
		{"/api/admin;x", "/api/admin/", Insensitive, true},
		{"/api/a%3Bx/admin", "/api/a/", Insensitive, false},
		{"/api/%E2%84%AAeys", "/api/keys", Insensitive, true},
		{"/api/%E2%84%AAeys", "/api/keys", Sensitive, false},
		{"/ap%C4%B1/admin", "/api/admin/", Insensitive, true},
		{"/ap%C4%B0/admin", "/api/admin/", Insensitive, true},
		{"/api/%C5%BFearch", "/api/search", Insensitive, true},
		{"/caf%C3%A9/x", Fold("/CAF%C3%A9/"), Insensitive, true},
		{"/", "/", Insensitive, true},
		{"/", "/api/", Insensitive, false},
		{"/v1/things%3AbatchGet", "/v1/things:batchGet", Sensitive, true},
		{"/V1/Things%3ABatchGet/x", MatchForm("/v1/things%3AbatchGet", Insensitive), Insensitive, true},
		{"/api/x%2A", "/api/x*", Sensitive, true},
		{"/api/x%2A%40y", "/api/x*@", Insensitive, true},
		{"/api/a%3Bb", "/api/a;b", Sensitive, false},
		{"/api/a%3Bb", "/api/a/", Sensitive, false},
	} {
		if got := HasPrefix(tc.p, tc.prefix, tc.c); got != tc.want {
			t.Errorf("HasPrefix(%q, %q, %v) = %v, want %v", tc.p, tc.prefix, tc.c, got, tc.want)
		}
	}
}

func TestMatchForm(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		c      Case
		want   string
	}{
		{"/api/reports", Sensitive, "/api/reports"},
		{"/API/Reports", Insensitive, "/api/reports"},
		{"/v1/a%3Ab/%2A", Sensitive, "/v1/a:b/*"},
		{"/%21%24%26%27%28%29%2A%2B%2C%3D%3A%40/", Sensitive, "/!$&'()*+,=:@/"},
		{"/API/%2A%C3%A9", Insensitive, "/api/*%c3%a9"},
		{"/a%3Bb%3F%23%25", Sensitive, "/a%3Bb%3F%23%25"},
	} {
		if got := MatchForm(tc.prefix, tc.c); got != tc.want {
			t.Errorf("MatchForm(%q, %v) = %q, want %q", tc.prefix, tc.c, got, tc.want)
		}
	}
}

// TestCleanAllocs: the request path's common case, a path that is
// canonical already, costs no allocation.
func TestCleanAllocs(t *testing.T) {
	for _, p := range []string{"/api/reports", "/caf%C3%A9/a;b=c", "/" + strings.Repeat("segment/", 200)} {
		if n := testing.AllocsPerRun(100, func() {
			if got, _, _ := Clean(p); got != p {
				t.Fatalf("Clean(%q) = %q", p, got)
			}
			HasPrefix(p, "/api/reports", Insensitive)
		}); n != 0 {
			t.Errorf("Clean(%.20q...): %v allocations", p, n)
		}
	}
}

func BenchmarkClean(b *testing.B) {
	for _, bc := range []struct{ name, p string }{
		{"canonical", "/api/reports/2024/summary"},
		{"encoded", "/api/caf%C3%A9/r%C3%A9sum%C3%A9"},
		{"ambiguous", "/api//x/../reports/./summary"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Clean(bc.p)
			}
		})
	}
	b.Run("HasPrefix", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			HasPrefix("/API/Reports/2024/summary", "/api/reports", Insensitive)
		}
	})
}

// fuzzPrefixes are canonical prefixes the fuzz test checks matching with.
var fuzzPrefixes = []string{"/", "/api/admin/", "/api/reports", "/a/b/", "/kis/", "/caf%C3%A9/", "/x;"}

// FuzzClean checks Clean against a plain reading of the path (every escape
// decoded, backslashes as slashes, dot segments resolved): Clean is
// idempotent, its result means what the input meant, so that it never
// moves a path into a prefix or out of one, and what it refuses is what
// origins would read in several ways.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"/", "/api/reports", "/API//Reports", `/api\..\admin`, "/api/%2e/reports", "/api/x/../admin",
		"/api%2Fadmin", "/api/%252e", "/api;x/admin", "/caf%c3%a9", "/ap%C4%B1/admin", "/%E2%84%AA", "/a/..;/b", "/..", "/\xc3\xa9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, form, err := Clean(p)
		segs, trailing, refErr := reference(p)
		if err != nil {
			if c != "" {
				t.Fatalf("Clean(%q) = %q with %v", p, c, err)
			}
			return
		}
		if refErr != "" {
			t.Fatalf("Clean(%q) = %q, but %s", p, c, refErr)
		}
		if c2, form2, err2 := Clean(c); c2 != c || form2 != Canonical || err2 != nil {
			t.Fatalf("not idempotent: Clean(%q) = %q; Clean of that = %q, %v, %v", p, c, c2, form2, err2)
		}
		if (form == Canonical) != (c == p) {
			t.Fatalf("Clean(%q) = %q, %v", p, c, form)
		}
		csegs, ctrailing, _ := reference(c)
		if strings.Join(csegs, "/") != strings.Join(segs, "/") || ctrailing != trailing {
			t.Fatalf("Clean(%q) = %q: means %q (trailing %v), not %q (trailing %v)", p, c, csegs, ctrailing, segs, trailing)
		}
		for _, prefix := range fuzzPrefixes {
			for _, cs := range []Case{Sensitive, Insensitive} {
				got := HasPrefix(c, Fold(prefix), cs)
				if cs == Sensitive {
					got = HasPrefix(c, prefix, cs)
				}
				if want := refHasPrefix(segs, trailing, prefix, cs); got != want {
					t.Fatalf("HasPrefix(Clean(%q) = %q, %q, %v) = %v; the path read plainly says %v", p, c, prefix, cs, got, want)
				}
			}
		}
	})
}

// reference reads p plainly: split at slashes and backslashes, each
// segment's parameters (from its first raw ";") kept apart, every escape
// decoded, dot segments resolved. It returns the segments (parameters
// included, raw) and whether a slash ends the path, or why origins would
// read p in several ways.
func reference(p string) (segs []string, trailing bool, problem string) {
	if !strings.HasPrefix(p, "/") {
		return nil, false, "not absolute"
	}
	raw := strings.Split(strings.ReplaceAll(p[1:], `\`, "/"), "/")
	for i, s := range raw {
		last := i == len(raw)-1
		name, params, hasParams := strings.Cut(s, ";")
		dec, err := url.PathUnescape(name)
		decParams, perr := url.PathUnescape(params)
		if err != nil || perr != nil {
			return nil, false, "bad escape"
		}
		if strings.ContainsAny(dec+decParams, `/\`) {
			return nil, false, "an encoded slash"
		}
		switch {
		case hasParams && (dec == "" || dec == "." || dec == ".."):
			return nil, false, "a parameter on a dot segment"
		case dec == "" || dec == ".":
			trailing = last
		case dec == "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
			trailing = last
		default:
			if hasParams {
				dec += ";" + decParams
			}
			segs = append(segs, dec)
			trailing = false
		}
	}
	return segs, trailing && len(segs) > 0, ""
}

// refHasPrefix matches the plain reading of a path against a prefix,
// parameters dropped, letters folded with Unicode's simple case mapping
// when cs is Insensitive.
func refHasPrefix(segs []string, trailing bool, prefix string, cs Case) bool {
	names := make([]string, len(segs))
	for i, s := range segs {
		names[i], _, _ = strings.Cut(s, ";")
	}
	s := "/" + strings.Join(names, "/")
	if trailing {
		s += "/"
	}
	pre, _ := url.PathUnescape(prefix)
	if cs == Insensitive {
		fold := func(r rune) rune {
			switch r {
			case 'K', '\u212A':
				return 'k'
			case 'S', '\u017F':
				return 's'
			case 'I', '\u0131', '\u0130':
				return 'i'
			}
			if 'A' <= r && r <= 'Z' {
				return r + 'a' - 'A'
			}
			return r
		}
		s, pre = strings.Map(fold, s), strings.Map(fold, pre)
	}
	return strings.HasPrefix(s, pre) || strings.HasSuffix(pre, "/") && s == pre[:len(pre)-1]
}

// FuzzHasPlainPrefix checks the fast path against HasPrefix: on every
// plain path, under both case policies, they agree.
func FuzzHasPlainPrefix(f *testing.F) {
	for _, s := range [][2]string{
		{"/api/search", "/api/"}, {"/api", "/api/"}, {"/ap", "/api/"}, {"/api/search", "/api/search"},
		{"/apix", "/api/"}, {"/api;x/search", "/api/"}, {"/API/search", "/api/"}, {"/ap%C4%B1/x", "/api/"},
		{"", "/"}, {"/", ""}, {"/a/b", "/A/"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, prefix string) {
		if !Plain(p) {
			return
		}
		for _, c := range []Case{Insensitive, Sensitive} {
			pre := prefix
			if c == Insensitive {
				pre = Fold(prefix)
			}
			if got, want := HasPlainPrefix(p, pre), HasPrefix(p, pre, c); got != want {
				t.Fatalf("HasPlainPrefix(%q, %q) = %v; HasPrefix(%s) = %v", p, pre, got, c, want)
			}
		}
	})
}

// FuzzCleanPlain holds CleanPlain to Clean and Plain: the same path, form
// and error, and plain exactly when the canonical path is Plain.
func FuzzCleanPlain(f *testing.F) {
	for _, s := range []string{"/", "/api/search", "/API/search", "/api/%41", "/api;x", "/api/./x", "/a//b", "/caf%c3%a9", "/\xc3\xa9", "api", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, form, err := Clean(p)
		c2, form2, plain, err2 := CleanPlain(p)
		if c2 != c || form2 != form || (err2 == nil) != (err == nil) || plain != (err == nil && Plain(c)) {
			t.Fatalf("CleanPlain(%q) = %q, %v, %v, %v; Clean says %q, %v, %v", p, c2, form2, plain, err2, c, form, err)
		}
	})
}
