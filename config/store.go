package config

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Values of on_store_error.
const (
	// StoreErrorLocal: while the shared store cannot be reached, each
	// replica admits on its share of every limit and budget (the
	// configured value divided by the live replicas it last saw, at least
	// 1).
	StoreErrorLocal = "local"
	// StoreErrorReject: requests that need the store get 503 while it
	// cannot be reached.
	StoreErrorReject = "reject"
)

// StoreConfig is the shared store that replicas of one fleet keep their
// common accounting in (backends' admitted work, key quotas): the top-level
// keys store, store_password_env, on_store_error, store_lease,
// store_heartbeat and store_timeout.
type StoreConfig struct {
	// URL is redis://host:port/db or rediss://host:port/db (TLS), a Redis 7
	// or Valkey server. Empty: no shared store; each process accounts
	// alone.
	URL string `yaml:"store"`
	// PasswordEnv names an environment variable holding the store's
	// password (never written in the URL).
	PasswordEnv string `yaml:"store_password_env"`
	// OnError is local or reject (see the constants).
	OnError string `yaml:"on_store_error"`
	// Lease is how long a replica's holdings (backend slots and quota
	// reservations in flight) outlive its last heartbeat: a replica that
	// dies frees what it held within Lease.
	Lease Duration `yaml:"store_lease"`
	// Heartbeat is how often a replica renews its lease and re-checks the
	// store (less than half the lease, so that one missed beat is not a
	// death).
	Heartbeat Duration `yaml:"store_heartbeat"`
	// Timeout bounds one store operation; a store slower than this counts
	// as down.
	Timeout Duration `yaml:"store_timeout"`
}

func defaultStore() StoreConfig {
	return StoreConfig{
		OnError:   StoreErrorLocal,
		Lease:     Duration(10 * time.Second),
		Heartbeat: Duration(3 * time.Second),
		Timeout:   Duration(250 * time.Millisecond),
	}
}

// Shared reports whether a shared store is configured.
func (s *StoreConfig) Shared() bool { return s.URL != "" }

// Password reads the password from PasswordEnv ("" when none is set).
func (s *StoreConfig) Password() string {
	if s.PasswordEnv == "" {
		return ""
	}
	return os.Getenv(s.PasswordEnv)
}

// StoreAddr is a parsed store URL.
type StoreAddr struct {
	Addr string // host:port
	DB   int
	TLS  bool
	User string
}

// Addr parses URL (validated already by Validate).
func (s *StoreConfig) Addr() (StoreAddr, error) { return parseStoreURL(s.URL) }

func parseStoreURL(raw string) (StoreAddr, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return StoreAddr{}, fmt.Errorf("want redis://host:port/db or rediss://host:port/db, got %q", raw)
	}
	a := StoreAddr{Addr: u.Host, TLS: u.Scheme == "rediss"}
	if u.Hostname() == "" {
		return StoreAddr{}, fmt.Errorf("has no host: %q", raw)
	}
	if u.Port() == "" {
		a.Addr = u.Host + ":6379"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			return StoreAddr{}, fmt.Errorf("must not carry a password; name an environment variable in store_password_env")
		}
		a.User = u.User.Username()
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return StoreAddr{}, fmt.Errorf("must not carry a query or fragment: %q", raw)
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		db, err := strconv.Atoi(p)
		if err != nil || db < 0 {
			return StoreAddr{}, fmt.Errorf("the path is the database number, e.g. /0; got %q", u.Path)
		}
		a.DB = db
	}
	return a, nil
}

func (s *StoreConfig) validate() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if s.URL != "" {
		if _, err := parseStoreURL(s.URL); err != nil {
			add("store", "%v", err)
		}
	}
	if s.PasswordEnv != "" {
		if _, ok := os.LookupEnv(s.PasswordEnv); !ok {
			add("store_password_env", "environment variable %s is not set", s.PasswordEnv)
		}
	}
	switch s.OnError {
	case StoreErrorLocal, StoreErrorReject:
	default:
		add("on_store_error", "want local or reject, got %q", s.OnError)
	}
	if s.Lease <= 0 || s.Heartbeat <= 0 || s.Timeout <= 0 {
		add("store_lease", "store_lease, store_heartbeat and store_timeout must be positive")
	} else if 2*s.Heartbeat > s.Lease {
		add("store_heartbeat", "must be at most half of store_lease (%s), so that one late heartbeat does not end a live replica's lease; got %s", s.Lease.D(), s.Heartbeat.D())
	}
	return errs
}
