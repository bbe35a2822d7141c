package quota

import (
	"context"
	"fmt"
	"time"
)

// Limits of one key; zero means no limit of that kind.
type Limits struct {
	RequestsPerMinute int64
	TokensPerMinute   int64 // prompt + completion
	TokensPerDay      int64
	MaxConcurrent     int64
}

// Kind names the limit a denial hit; it is the word in the 429 message and a
// metric label value.
type Kind string

const (
	Requests     Kind = "requests"       // requests_per_minute
	Tokens       Kind = "tokens"         // tokens_per_minute
	TokensPerDay Kind = "tokens_per_day" // tokens_per_day
	Concurrent   Kind = "concurrent"     // max_concurrent
)

// Status is what OpenAI's x-ratelimit-* headers report for a key (the
// per-minute limits). A Limit of zero means the key has no limit of that
// kind: its Remaining and Reset are zero too, and the headers of that kind
// should be left out.
type Status struct {
	LimitRequests, RemainingRequests int64
	// ResetRequests is the time until the request window is empty again:
	// until the last request counted now expires.
	ResetRequests time.Duration

	LimitTokens, RemainingTokens int64
	// ResetTokens is the time until the token window would be empty if the
	// requests in flight ended now without using anything more than they
	// did so far: until the last settled usage expires, and at least a
	// window from now while anything is in flight (its usage, once settled,
	// counts for a window from then).
	ResetTokens time.Duration
}

// Denied is the error Reserve returns when a limit refuses.
type Denied struct {
	Kind  Kind
	Limit int64 // the configured limit
	// InUse is what the window holds now (reserved + settled, not yet
	// expired); for Concurrent, the requests in flight.
	InUse int64
	Asked int64 // what this request asked for (tokens; 1 for Requests and Concurrent)
	// RetryAfter is when the ask would fit if nothing else arrives: exact
	// when only settled usage has to expire; when requests in flight must
	// end first it cannot be known, and it is an estimate (Estimated).
	RetryAfter time.Duration
	Estimated  bool // RetryAfter waits for requests in flight: a guess, not a promise
	Never      bool // Asked > Limit: retrying cannot help (RetryAfter is 0)
	Status     Status
}

// Error is the client-safe sentence for the 429: it names the limit, its
// value, what is in use and what was asked; never the key.
func (d *Denied) Error() string {
	switch {
	case d.Never:
		return fmt.Sprintf("request too large for %s: limit %d, requested %d (prompt + maximum output); it can never fit, retrying cannot help: shorten the prompt or lower the maximum output tokens",
			d.Kind.phrase(), d.Limit, d.Asked)
	case d.Kind == Concurrent:
		return fmt.Sprintf("rate limit reached for %s: limit %d, %d in flight; retry when one ends",
			d.Kind.phrase(), d.Limit, d.InUse)
	default:
		return fmt.Sprintf("rate limit reached for %s: limit %d, %d in use, %d requested; retry in %s",
			d.Kind.phrase(), d.Limit, d.InUse, d.Asked, ceilSecond(d.RetryAfter))
	}
}

func (k Kind) phrase() string {
	switch k {
	case Requests:
		return "requests per minute"
	case Tokens:
		return "tokens per minute"
	case TokensPerDay:
		return "tokens per day"
	case Concurrent:
		return "concurrent requests"
	}
	return string(k)
}

// ceilSecond rounds d up to a whole second (at least one).
func ceilSecond(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second * time.Second
	return max(s, time.Second)
}

// Store keeps the counters of every key. Local (this package) is
// in-process; a shared store (Redis/Valkey) can implement the same
// interface with the same semantics (see the package doc).
type Store interface {
	// Reserve takes one request, one concurrency slot and tokens (prompt +
	// requested output) for key (its name) under lim, atomically: all or
	// nothing. Returns *Denied when a limit refuses.
	Reserve(ctx context.Context, key string, lim Limits, tokens int64) (Reservation, error)
	// Status reports the key's window without taking anything.
	Status(key string, lim Limits) Status
}

// Reservation is one admitted request's hold.
type Reservation interface {
	// Status after this reservation was taken (for the x-ratelimit-*
	// headers of the response).
	Status() Status
	// Settle ends the hold with the request's real usage (prompt +
	// completion tokens; may exceed what was reserved: the excess is debt
	// that the window carries). used < 0 means "unknown": keep what was
	// reserved. Releases the concurrency slot. Idempotent: only the first
	// call counts.
	Settle(used int64)
}
