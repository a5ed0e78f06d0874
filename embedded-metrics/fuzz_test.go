package emf

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func FuzzValidate(f *testing.F) {
	addValidateSeeds(f)
	f.Add([]byte(`{"_aws":{"Timestamp":1574109732004,"CloudWatchMetrics":[{"Namespace":"a","Dimensions":[[]],"Metrics":[{"Name":"x"}]}]},"x":[1,2]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		vs := Validate(doc, specNow, ValidateOptions{})
		if again := Validate(doc, specNow, ValidateOptions{}); !slices.Equal(vs, again) {
			t.Fatalf("not deterministic: %v then %v", vs, again)
		}
		for _, v := range vs {
			if !strings.HasPrefix(v.Path, "$") || v.Problem == "" || v.Allowed == "" {
				t.Fatalf("incomplete violation %+v", v)
			}
		}
		if len(vs) == 0 {
			var root map[string]json.RawMessage
			if err := json.Unmarshal(doc, &root); err != nil || root["_aws"] == nil {
				t.Fatalf("accepted a document without an object root or _aws: %q (%v)", doc, err)
			}
		}
	})
}

// FuzzLoggerDocuments checks that whatever the Logger accepts, it writes as
// documents the validator accepts, and that it loses no accepted value.
func FuzzLoggerDocuments(f *testing.F) {
	f.Add("Latency", "Tier", "free", "requestId", "abc", 12.5, uint8(3), uint16(0))
	f.Add("a\"b\\c\n", "k", "v", "p", "\u2028", -1e-7, uint8(250), uint16(4096))
	f.Add("é", ":x", "", "_aws", "x", 1e21, uint8(1), uint16(1))
	f.Add("\xff", "0", "", "0", "0", 1e21, uint8(1), uint16(1)) // invalid UTF-8 name: once written as U+FFFD
	f.Fuzz(func(t *testing.T, name, dimKey, dimValue, propKey, propValue string, value float64, n uint8, maxSize uint16) {
		l, sink := newTestLogger(t, Config{MaxDocumentSize: ByteSize(maxSize) + minDocumentSize}, nil)
		l.PutDimensions(Dimension{dimKey, dimValue})
		l.SetProperty(propKey, propValue)
		accepted := 0
		for range n {
			if l.PutMetric(name, value, Milliseconds) == nil {
				accepted++
			}
		}
		err := l.FlushAt(context.Background(), testNow)
		st := l.Stats()
		if st.Sinks[0].Rejected != 0 {
			t.Fatalf("the logger built a document the validator refused: %v", err)
		}
		got := 0
		for _, d := range sink.docs {
			var root map[string]json.RawMessage
			if err := json.Unmarshal(d, &root); err != nil {
				t.Fatal(err)
			}
			got += countValues(t, root[name])
		}
		if err == nil && got != accepted {
			t.Fatalf("accepted %d values, documents hold %d", accepted, got)
		}
	})
}

// FuzzDecode holds the package's decoder to encoding/json: it accepts
// exactly what json.Valid accepts, and decodes every value as
// encoding/json does, the last of repeated members winning.
func FuzzDecode(f *testing.F) {
	addValidateSeeds(f)
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `""`, `0`, `-0.5e+7`, `01`, `1.`, `.5`, `-`, `1e`, `tru`, `nul`, `[1,]`, `{"a":1,}`, `{"a" 1}`,
		`"\u00e9\ud83d\ude00\ud800\udc00"`, `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `"\ud800\\"`, "\"\xff\xfe\"", "\"a\x01\"",
		`"\q"`, `"\u12g4"`, `{"a":1,"a":[true,false,null]}`, `[[[[[]]]]]`, ` {"x" : "y\"\\\/\b\f\n\r\t"} `, `{} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var d jdoc
		err := d.decode(string(doc))
		if valid := json.Valid(doc); valid != (err == nil) {
			t.Fatalf("decode %q: %v, but json.Valid says %v", doc, err, valid)
		}
		if err != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		if got := jdocValue(&d, 0); !reflect.DeepEqual(got, want) {
			t.Fatalf("decode %q = %#v, encoding/json has %#v", doc, got, want)
		}
	})
}

// jdocValue is node i as encoding/json decodes it into an any with
// UseNumber.
func jdocValue(d *jdoc, i int32) any {
	switch n := d.nodes[i]; n.kind {
	case jBool:
		return d.text(i) == "true"
	case jNumber:
		return json.Number(d.text(i))
	case jString:
		return d.text(i)
	case jArray:
		out := []any{}
		for _, e := range d.elems(i) {
			out = append(out, jdocValue(d, e))
		}
		return out
	case jObject:
		out := map[string]any{}
		for k := i + 1; k < n.next; k = d.nodes[k+1].next {
			out[d.text(k)] = jdocValue(d, k+1)
		}
		return out
	}
	return nil
}

// addValidateSeeds adds the validator's test documents to f's corpus.
func addValidateSeeds(f *testing.F) {
	paths, _ := filepath.Glob("testdata/validate/*/*.json")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}
