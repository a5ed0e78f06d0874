// Package accuracy measures how far the counter stores' decisions are from
// an exact limit: N simulated edge nodes, each with its own client of one
// shared store, replay a generated trace and every decision is compared
// with an exact sliding log. See docs/accuracy.md for the method and the
// figures.
//
// A trace (Generate) is a function of its config and seed: steady users
// (Poisson arrivals below their limit), bursty users (silences and bursts
// of about their limit) and one scraper far above it, spread over the
// nodes round robin or at random. Each node's clock is off by a fixed skew,
// applied to the now it passes its store. A store may instead count by one
// clock of its own, off true time by a skew of its own (Setup.ServerClock),
// as Redis does under the server clock.
//
// The oracle (Oracle) allows a request at true instant t iff fewer than
// Limit requests of its identity were allowed by the oracle in (t − W, t].
//
// A replay (Replay) feeds the trace through the nodes one request at a time
// in true time order, so that decisions are made in trace order and the
// replay measures the algorithms, the over-limit cache and batching, not
// races. It is deterministic for a deterministic store.
//
// Nothing in the package is safe for concurrent use; a Trace may be shared
// by replays that do not modify it.
package accuracy
