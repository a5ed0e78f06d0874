package emf_test

import (
	"fmt"
	"os"
	"time"

	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

// An aggregator's window: two dimension sets, a counter and a latency
// histogram given as values and counts.
func ExampleAppendDocuments() {
	window := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	doc := emf.Document{
		Namespace: "ratewarden",
		Timestamp: window,
		Dimensions: [][]emf.Dimension{
			{{Name: "Tier", Value: "free"}},
			{}, // service-wide
		},
		Properties: []emf.Property{emf.StringProperty("window", "2025-01-02T03:00:00Z/PT1M")},
		Metrics: []emf.Metric{
			{Name: "Blocked", Unit: emf.Count, Values: []float64{60}},
			{Name: "StoreLatency", Unit: emf.Milliseconds, Values: []float64{0.5, 2}, Counts: []uint64{2, 1}},
		},
	}
	out, err := emf.AppendDocuments(nil, &doc, emf.Limits{Now: window.Add(time.Minute)})
	if err != nil {
		fmt.Println(err)
		return
	}
	os.Stdout.Write(out)
	// Output:
	// {"Tier":"free","window":"2025-01-02T03:00:00Z/PT1M","Blocked":60,"StoreLatency":[0.5,0.5,2],"_aws":{"Timestamp":1735786800000,"CloudWatchMetrics":[{"Namespace":"ratewarden","Dimensions":[["Tier"],[]],"Metrics":[{"Name":"Blocked","Unit":"Count"},{"Name":"StoreLatency","Unit":"Milliseconds"}]}]}}
}
