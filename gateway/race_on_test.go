//go:build race

package gateway

// raceEnabled: the race detector doubles the stack guard the runtime keeps
// below a goroutine's frames and grows the frames themselves, so that a
// stack depth the runtime would halve a stack for without it, it does not
// with it (TestOpenStreamHandlerStackIsShallow runs without it, in make
// benchonce).
const raceEnabled = true
