package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// KVEventsConfig is where a backend publishes vLLM's KV-cache events
// (vLLM's --kv-events-config): either endpoints (a url backend) or ports
// joined to each address (a dns or srv backend; a url backend's host too).
type KVEventsConfig struct {
	// Endpoint is the PUB socket, tcp://host:port; ReplayEndpoint the
	// ROUTER replay socket (optional: without it a gap clears the
	// backend's index instead of being replayed).
	Endpoint       string `yaml:"endpoint"`
	ReplayEndpoint string `yaml:"replay_endpoint"`
	// Port and ReplayPort are joined to the backend's address instead.
	Port       int `yaml:"port"`
	ReplayPort int `yaml:"replay_port"`
	// Topic is the publisher's topic ("" subscribes to every topic).
	Topic string `yaml:"topic"`
	// DataParallelSize: rank r publishes on the ports + r (1: one rank).
	DataParallelSize int `yaml:"data_parallel_size"`
}

// Set reports whether the backend publishes events at all.
func (k *KVEventsConfig) Set() bool { return k != nil && (k.Endpoint != "" || k.Port != 0) }

// Ranks is data_parallel_size, 1 when unset.
func (k *KVEventsConfig) Ranks() int { return max(k.DataParallelSize, 1) }

// Endpoints returns rank's event and replay endpoints for a backend at
// host (the address its URL names); replay is "" without one.
func (k *KVEventsConfig) Endpoints(host string, rank int) (events, replay string) {
	if k.Endpoint != "" {
		return offsetPort(k.Endpoint, rank), offsetPort(k.ReplayEndpoint, rank)
	}
	events = "tcp://" + net.JoinHostPort(host, strconv.Itoa(k.Port+rank))
	if k.ReplayPort != 0 {
		replay = "tcp://" + net.JoinHostPort(host, strconv.Itoa(k.ReplayPort+rank))
	}
	return events, replay
}

// offsetPort adds rank to a tcp://host:port endpoint's port, as vLLM's
// data-parallel ranks do.
func offsetPort(ep string, rank int) string {
	if ep == "" || rank == 0 {
		return ep
	}
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(ep, "tcp://"))
	n, _ := strconv.Atoi(port)
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(n+rank))
}

// checkTCPEndpoint checks tcp://host:port (a host, not a wildcard: the
// gateway connects to it).
func checkTCPEndpoint(s string) error {
	rest, ok := strings.CutPrefix(s, "tcp://")
	host, port, err := net.SplitHostPort(rest)
	if !ok || err != nil || host == "" || host == "*" {
		return fmt.Errorf("want tcp://host:port, got %q", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("want a port number from 1 to 65535, got %q", port)
	}
	return nil
}

// validate checks a backend entry's kv_events at path.
func (k *KVEventsConfig) validate(p *problems, path string, discovered bool) {
	switch {
	case k.Endpoint != "" && k.Port != 0:
		p.add(path, "want endpoint or port, not both")
	case k.Endpoint == "" && k.Port == 0:
		p.add(path, "want endpoint (tcp://host:port) or port")
	case k.Endpoint != "" && discovered:
		p.add(path+".endpoint", "a dns or srv entry stands for several servers: give port (joined to each address)")
	}
	if k.Endpoint != "" {
		if err := checkTCPEndpoint(k.Endpoint); err != nil {
			p.add(path+".endpoint", "%v", err)
		}
	}
	if k.ReplayEndpoint != "" {
		if err := checkTCPEndpoint(k.ReplayEndpoint); err != nil {
			p.add(path+".replay_endpoint", "%v", err)
		} else if k.Endpoint == "" {
			p.add(path+".replay_endpoint", "goes with endpoint; with port, give replay_port")
		}
	}
	r := k.Ranks()
	if k.DataParallelSize < 0 || k.DataParallelSize > 64 {
		p.add(path+".data_parallel_size", "want 1 to 64, got %d", k.DataParallelSize)
	}
	if k.Port < 0 || k.Port+r-1 > 65535 {
		p.add(path+".port", "want a port number from 1 to 65535 (for every rank), got %d", k.Port)
	}
	if k.ReplayPort < 0 || k.ReplayPort+r-1 > 65535 || (k.ReplayPort != 0 && k.Port == 0) {
		p.add(path+".replay_port", "want a port number from 1 to 65535 (for every rank), with port, got %d", k.ReplayPort)
	}
}

// Values of a model's routing.
const (
	RoutingDefault = ""        // power of two choices, or prefix affinity
	RoutingPrecise = "precise" // by the backends' KV events
)

// PreciseRoutingConfig tunes routing: precise.
type PreciseRoutingConfig struct {
	// BlockSize is the backends' KV block size in tokens (vLLM's
	// --block-size, 16 by default): events of another size are not
	// indexed.
	BlockSize int `yaml:"block_size"`
	// MaxBlocks caps the blocks indexed per backend (its KV capacity
	// bounds it too).
	MaxBlocks int `yaml:"max_blocks"`
	// CacheWeight and LoadWeight weigh a backend's cached share of the
	// prompt against its load in the pick (docs/routing.md).
	CacheWeight float64 `yaml:"cache_weight"`
	LoadWeight  float64 `yaml:"load_weight"`
}

// Defaults of precise_routing.
const (
	DefaultBlockSize   = 16
	DefaultMaxBlocks   = 1 << 20
	DefaultCacheWeight = 1.0
	DefaultLoadWeight  = 2.0
)

// PreciseOrDefault is the model's precise_routing with its defaults.
func (m *ModelConfig) PreciseOrDefault() PreciseRoutingConfig {
	p := m.Precise
	if p.BlockSize == 0 {
		p.BlockSize = DefaultBlockSize
	}
	if p.MaxBlocks == 0 {
		p.MaxBlocks = DefaultMaxBlocks
	}
	if p.CacheWeight == 0 {
		p.CacheWeight = DefaultCacheWeight
	}
	if p.LoadWeight == 0 {
		p.LoadWeight = DefaultLoadWeight
	}
	return p
}

// validateRouting checks routing and precise_routing at path (models[i]).
func (m *ModelConfig) validateRouting(p *problems, path string) {
	switch m.Routing {
	case RoutingDefault, RoutingPrecise:
	default:
		p.add(path+".routing", "want precise or nothing, got %q", m.Routing)
	}
	pr := m.Precise
	if pr.BlockSize < 0 || pr.BlockSize > 1024 {
		p.add(path+".precise_routing.block_size", "want 1 to 1024, got %d", pr.BlockSize)
	}
	if pr.MaxBlocks < 0 {
		p.add(path+".precise_routing.max_blocks", "must not be negative, got %d", pr.MaxBlocks)
	}
	if pr.CacheWeight < 0 || pr.LoadWeight < 0 {
		p.add(path+".precise_routing", "cache_weight and load_weight must not be negative")
	}
}
