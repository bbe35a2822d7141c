// Package replicas holds the tests of several maitred replicas in front of
// one fleet: real processes (the binary is built once in TestMain), their
// own redis-server (internal/redistest), and simulated vLLM backends whose
// own accounting (sim.Stats) is the measure; backends found by DNS are
// answered by the tests' own DNS server (internal/dnstest). It has no code
// of its own.
package replicas
