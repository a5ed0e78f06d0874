package accuracy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Class is the kind of client an identity stands for.
type Class uint8

// The classes of identities in a trace.
const (
	// Steady clients send Poisson arrivals below their limit.
	Steady Class = iota
	// Bursty clients alternate silent spells with bursts of about their limit.
	Bursty
	// Scraper is one client far above its limit at a constant rate.
	Scraper

	numClasses = iota
)

// String returns the class's name.
func (c Class) String() string {
	switch c {
	case Steady:
		return "steady"
	case Bursty:
		return "bursty"
	case Scraper:
		return "scraper"
	}
	return "unknown"
}

// Rate is a request rate in requests per second.
type Rate float64

// Assignment is how requests are spread over the edge nodes.
type Assignment uint8

// The assignments.
const (
	// RoundRobin sends the i-th request of the trace to node i mod Nodes,
	// as a load balancer without affinity does.
	RoundRobin Assignment = iota
	// Random sends each request to a node drawn from the seed.
	Random
)

// TraceConfig describes a trace. Rates are given relative to the rule the
// trace is meant for, Limit hits per Window, so that one description fits
// any rule. The zero value is not usable: Duration, Nodes, Limit and Window
// are required.
type TraceConfig struct {
	Name     string        // for the report
	Seed     uint64        // the trace is a function of the config, seed included
	Duration time.Duration // simulated time the trace spans, from instant 0
	Nodes    int           // edge nodes the requests are spread over: 1 to 255
	Assign   Assignment

	Limit  int64         // the rule's limit, which the clients' rates are relative to
	Window time.Duration // the rule's window

	// Steady clients each send Poisson arrivals at a rate drawn uniformly
	// from SteadyLoad × Limit/Window.
	Steady     int
	SteadyLoad [2]float64
	// Bursty clients each alternate silence (exponential, mean Window) with
	// bursts lasting 0.1 to 1 Window of Poisson arrivals whose expected
	// number is drawn uniformly from BurstSize × Limit: around the limit.
	Bursty    int
	BurstSize [2]float64
	// ScraperRate is the rate of the one scraper, a Poisson stream from
	// ScraperFrom to ScraperUntil (0: to the end); 0 means no scraper.
	ScraperRate  Rate
	ScraperFrom  time.Duration
	ScraperUntil time.Duration
}

// Request is one request of a trace.
type Request struct {
	At   time.Duration // true instant, from the trace's start
	ID   int32         // the identity, an index into Trace.Classes
	Node uint8         // the edge node that decides it
}

// Trace is a generated sequence of requests in true time order. Ties keep
// the order of generation, so a trace is a function of its config.
type Trace struct {
	Config   TraceConfig
	Requests []Request
	Classes  []Class // the class of each identity
}

// Count returns the number of requests of identities of class c.
func (tr *Trace) Count(c Class) int {
	n := 0
	for i := range tr.Requests {
		if tr.Classes[tr.Requests[i].ID] == c {
			n++
		}
	}
	return n
}

func (c *TraceConfig) validate() error {
	var errs []error
	if c.Duration <= 0 {
		errs = append(errs, fmt.Errorf("Duration: %v: want a positive duration", c.Duration))
	}
	if c.Nodes < 1 || c.Nodes > math.MaxUint8 {
		errs = append(errs, fmt.Errorf("Nodes: %d: want 1 to %d", c.Nodes, math.MaxUint8))
	}
	if c.Limit < 1 || c.Window <= 0 {
		errs = append(errs, fmt.Errorf("Limit, Window: %d per %v: want a positive limit and window", c.Limit, c.Window))
	}
	if c.Steady < 0 || c.Bursty < 0 {
		errs = append(errs, fmt.Errorf("Steady, Bursty: %d, %d: want at least 0", c.Steady, c.Bursty))
	}
	if c.Steady > 0 && !(0 < c.SteadyLoad[0] && c.SteadyLoad[0] <= c.SteadyLoad[1]) {
		errs = append(errs, fmt.Errorf("SteadyLoad: %v: want 0 < low ≤ high", c.SteadyLoad))
	}
	if c.Bursty > 0 && !(0 < c.BurstSize[0] && c.BurstSize[0] <= c.BurstSize[1]) {
		errs = append(errs, fmt.Errorf("BurstSize: %v: want 0 < low ≤ high", c.BurstSize))
	}
	if c.ScraperRate < 0 || c.ScraperFrom < 0 || c.ScraperUntil < 0 {
		errs = append(errs, fmt.Errorf("ScraperRate, ScraperFrom, ScraperUntil: %v, %v, %v: want at least 0", c.ScraperRate, c.ScraperFrom, c.ScraperUntil))
	}
	if len(errs) > 0 {
		return fmt.Errorf("generate trace: %w", errors.Join(errs...))
	}
	return nil
}

// Generate returns the trace c describes. The same config gives the same
// trace, request for request.
func Generate(c TraceConfig) (*Trace, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed_acc0))
	tr := &Trace{Config: c}
	limitRate := float64(c.Limit) / c.Window.Seconds()
	end := c.Duration

	// poisson appends the arrivals of identity id at rate from from to until.
	poisson := func(id int32, rate float64, from, until time.Duration) {
		if rate <= 0 {
			return
		}
		at := from
		for {
			at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			if at >= until {
				return
			}
			tr.Requests = append(tr.Requests, Request{At: at, ID: id})
		}
	}
	newID := func(cl Class) int32 {
		tr.Classes = append(tr.Classes, cl)
		return int32(len(tr.Classes) - 1)
	}

	if c.ScraperRate > 0 {
		until := end
		if c.ScraperUntil > 0 {
			until = min(c.ScraperUntil, end)
		}
		poisson(newID(Scraper), float64(c.ScraperRate), c.ScraperFrom, until)
	}
	for range c.Steady {
		load := c.SteadyLoad[0] + rng.Float64()*(c.SteadyLoad[1]-c.SteadyLoad[0])
		poisson(newID(Steady), load*limitRate, 0, end)
	}
	for range c.Bursty {
		id := newID(Bursty)
		at := time.Duration(0)
		for at < end {
			at += time.Duration(rng.ExpFloat64() * float64(c.Window)) // silence
			span := time.Duration((0.1 + 0.9*rng.Float64()) * float64(c.Window))
			size := (c.BurstSize[0] + rng.Float64()*(c.BurstSize[1]-c.BurstSize[0])) * float64(c.Limit)
			poisson(id, size/span.Seconds(), at, min(at+span, end))
			at += span
		}
	}

	slices.SortStableFunc(tr.Requests, func(a, b Request) int { return cmp.Compare(a.At, b.At) })
	for i := range tr.Requests {
		switch c.Assign {
		case RoundRobin:
			tr.Requests[i].Node = uint8(i % c.Nodes)
		case Random:
			tr.Requests[i].Node = uint8(rng.IntN(c.Nodes))
		}
	}
	return tr, nil
}
