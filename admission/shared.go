package admission

import (
	"context"
	"errors"
	"time"
)

// Shared is the fleet-wide account of each backend's admitted work, kept in
// a store all replicas of the gateway use (package store implements it on
// Redis or Valkey). The pool picks a backend locally, then asks Shared to
// confirm, never while holding its lock.
type Shared interface {
	// Take holds one request and tokens on backend for every replica, if
	// the backend's shared account stays within maxInFlight requests and
	// budget tokens (0: no limit of that kind); an idle backend takes a
	// request over its budget, as the pool's own rule. It returns
	// ErrHeldElsewhere when the holdings of other replicas leave no room,
	// and ErrStoreDown (with a local Hold, which the store writes when it
	// is back) when the store cannot be reached.
	Take(ctx context.Context, backend string, maxInFlight, budget, tokens int) (Hold, error)
	// State is the store's standing; the pool reads it under its lock, so
	// it must not block.
	State() SharedState
	// Seen is the backend's holdings, this replica's and the other
	// replicas', as the store counted them in its last answer about it
	// while up and settled (ok false: none yet). The pool reads it under
	// its lock, so it must not block.
	Seen(backend string) (mine, others int, ok bool)
}

// Hold is one request's holding on a backend in the shared account.
type Hold interface {
	// Release gives the holding back (idempotent).
	Release()
}

// SharedState is the shared store as a replica last saw it.
type SharedState struct {
	// Up: the last operation reached the store.
	Up bool
	// Replicas is the number of live replicas last counted (at least 1).
	Replicas int
	// Replica is this replica's name in the store.
	Replica string
	// Since is when Up last changed; Err is the last error while down.
	Since time.Time
	Err   string
	// Settling: the store is back, but the other replicas may not have
	// written back yet what they took while it was down, so its counts
	// may be short: the pool keeps to its down-time allowance as well.
	Settling bool
}

var (
	// ErrHeldElsewhere: other replicas hold the backend's room.
	ErrHeldElsewhere = errors.New("backend's room is held by other replicas")
	// ErrStoreDown: the shared store cannot be reached.
	ErrStoreDown = errors.New("shared store unavailable")
)

// share is limit divided among n live replicas, at least 1 (0 stays 0: no
// limit).
func share(limit, n int) int {
	if limit <= 0 || n <= 1 {
		return limit
	}
	return max(1, limit/n)
}

// ResponseOwner is who made a stored Responses API response (vLLM keeps it
// in the memory of the backend that made it): the name of the API key
// that created it ("" without auth), the model as the client named it, and
// the backend's URL. The gateway forwards a request by id only to that
// backend, and, with API keys, only for that key.
type ResponseOwner struct {
	Key, Model, Backend string
}

// ResponseOwners keeps the owners of stored responses for every replica
// (package store implements it on the shared store).
type ResponseOwners interface {
	// PutResponseOwner records o as the owner of response id.
	PutResponseOwner(ctx context.Context, id string, o ResponseOwner) error
	// ResponseOwner is the owner recorded for id; found is false when
	// none is. An error (ErrStoreDown) means it could not be asked.
	ResponseOwner(ctx context.Context, id string) (o ResponseOwner, found bool, err error)
}

// downMaxIn is what this replica may run on a backend whose limit is
// limit (> 0) while the store is down or settling: the room it held there
// when the store last answered, plus its even share (of the live
// replicas) of the room nobody held then. The other replicas keep to
// theirs, so together they stay within the limit, where each one's share
// of the limit would not be (a replica holding more than its share when
// the store stopped answering keeps it, while the others would take
// theirs). Without an answer yet about the backend: its share of the
// limit.
func downMaxIn(sh Shared, backend string, limit int, st SharedState) int {
	n := max(st.Replicas, 1)
	mine, others, ok := sh.Seen(backend)
	if !ok {
		return share(limit, n)
	}
	room := max(0, limit-mine-others)
	return min(limit, mine+room/n)
}
