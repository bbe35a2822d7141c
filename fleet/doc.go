// Package fleet knows the backends: the configuration file that names them
// (Config: defaults, strict decode with key paths, validation), their state
// as seen by probes, and which one a request goes to.
//
// # Model
//
// Each configured model has one or more backends (vLLM servers). A prober
// goroutine per backend asks GET /health and then GET /v1/models every
// health.interval: a backend is Loading until both succeed and the model is
// listed (vLLM refuses connections while it loads), then Ready, and
// Unhealthy when a ready backend fails a probe. The max_model_len a backend
// reports is recorded; Model.MaxModelLen prefers the config's value.
// Requests go only to Ready backends: Pick takes the one with the fewest
// requests in flight.
//
// # Concurrency
//
// Backend state is written by its prober and read by request goroutines
// under the backend's mutex; in-flight counts are atomics. Fleet itself is
// immutable after New. fleet uses net/http only as a client.
package fleet
