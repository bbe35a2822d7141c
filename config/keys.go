package config

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sync/atomic"

	"go.yaml.in/yaml/v3"
)

// AuthConfig is the `auth` section: the API keys the gateway accepts.
// With it, every model API request must carry one (Authorization: Bearer,
// or x-api-key on Anthropic's Messages); without it the gateway is open.
type AuthConfig struct {
	// Keys are the keys written in the config itself.
	Keys []KeyConfig `yaml:"keys"`
	// KeysFile is a YAML file holding more keys (`keys: [...]`, the same
	// shape), re-read while the gateway runs, so keys rotate without a
	// restart and without cutting streams. A relative path is read from
	// the config file's folder.
	KeysFile string `yaml:"keys_file"`

	// file is the keys_file as Load read and validated it, so that the
	// gateway puts in force what was checked without parsing it again (a
	// 100k-key file is most of a start's work); nil when not loaded. A
	// pointer to the holder: copies of the section share it, and what
	// one takes (TakeLoadedKeysFile) is gone for all.
	file *loadedKeysHolder
}

type loadedKeysHolder struct{ keys atomic.Pointer[LoadedKeys] }

// LoadedKeys is a keys_file's keys as Load read them, with the SHA-256 of
// the bytes they came from.
type LoadedKeys struct {
	// Set is the config's auth.keys then the file's, as read and
	// validated together (ReadKeySet: what a reload reads too).
	Set *KeySet
	Sum [32]byte
}

// LoadedKeysFile is the keys_file as Load read it (nil: not read by Load,
// e.g. a config built in code).
func (a *AuthConfig) LoadedKeysFile() *LoadedKeys {
	if a.file == nil {
		return nil
	}
	return a.file.keys.Load()
}

// TakeLoadedKeysFile is LoadedKeysFile, once: the config lets go of the
// keys, so that they are not held twice by a gateway that makes its table
// of them; later calls get nil (and a gateway reads the file again).
func (a *AuthConfig) TakeLoadedKeysFile() *LoadedKeys {
	if a.file == nil {
		return nil
	}
	return a.file.keys.Swap(nil)
}

// KeyConfig is one API key: a tenant (a team, an application).
type KeyConfig struct {
	// Name is what logs and metrics show; the key itself never is.
	Name string `yaml:"name"`
	// SHA256 is the hex SHA-256 digest of the key (`printf %s KEY |
	// sha256sum`); Env names an environment variable holding the key
	// itself. Exactly one of them.
	SHA256 string `yaml:"sha256"`
	Env    string `yaml:"env"`
	// Models the key may use, by the name clients send; "*" allows all.
	Models []string `yaml:"models"`
	// Priority is the key's priority class, the highest its requests may
	// use (x-maitred-priority may only lower it); default_priority when
	// unset.
	Priority string `yaml:"priority"`
	// Limits are the key's quotas; 0 means no limit of that kind.
	Limits KeyLimits `yaml:"limits"`
	// Weight is the key's share under a model's fairness tokens: a key of
	// weight 2 gets twice the service of a key of weight 1 when both wait
	// (a positive number; 1 when unset).
	Weight *float64 `yaml:"weight"`
}

// WeightOrDefault is the key's weight, 1 when unset.
func (k *KeyConfig) WeightOrDefault() float64 {
	if k.Weight == nil {
		return 1
	}
	return *k.Weight
}

// KeyLimits are one key's quotas (0: none of that kind).
type KeyLimits struct {
	// RequestsPerMinute: requests started in any 60 s.
	RequestsPerMinute int64 `yaml:"requests_per_minute"`
	// TokensPerMinute: prompt + completion tokens in any 60 s (prompt plus
	// requested output reserved at admission, settled with the real usage).
	TokensPerMinute int64 `yaml:"tokens_per_minute"`
	// MaxConcurrent: requests in flight at once.
	MaxConcurrent int64 `yaml:"max_concurrent"`
	// TokensPerDay: prompt + completion tokens in any 24 h.
	TokensPerDay int64 `yaml:"tokens_per_day"`
}

// AllModels in a key's models allows every model.
const AllModels = "*"

// Digest is the key's SHA-256 digest: the configured one, or that of the
// environment variable's value. Call it on a validated key.
func (k *KeyConfig) Digest() ([32]byte, error) {
	var scratch []byte
	v := viewOf(k, &scratch)
	return v.digest()
}

func (a *AuthConfig) validate(c *Config) []error {
	errs := validateKeys(a.Keys, nil, func(i int) string { return fmt.Sprintf("auth.keys[%d]", i) }, c)
	if len(a.Keys) == 0 && a.KeysFile == "" {
		errs = append(errs, &FieldError{Path: "auth", Msg: "want keys or keys_file (an auth section with no keys would refuse every request)"})
	}
	return errs
}

// validateKeys checks a list of keys (keys then more, as one list: the
// config's and a keys_file's), naming each problem by its key path
// (pathOf(i): auth.keys[i], or keys[i] in a keys_file): the checks a
// KeySet's are (keys_set.go).
func validateKeys(keys, more []KeyConfig, pathOf func(i int) string, c *Config) []error {
	b := newKeySetBuilder(c, pathOf, len(keys)+len(more))
	b.addConfigs(keys, more)
	return b.errs
}

// keysFile is the shape of a keys_file.
type keysFile struct {
	Keys []KeyConfig `yaml:"keys"`
}

// ParseKeys decodes a keys_file's content (`keys: [...]`, in YAML or as
// JSON) strictly and validates it against cfg (its priority classes, and
// the names and keys of auth.keys, which must not repeat). Errors name
// key paths ("keys[2].sha256").
func ParseKeys(data []byte, cfg *Config) ([]KeyConfig, error) {
	fileKeys, ok := decodeKeysJSON(data)
	if !ok {
		var err error
		if fileKeys, err = decodeKeysYAML(data); err != nil {
			return nil, err
		}
	}
	return validateFileKeys(fileKeys, cfg)
}

// validateFileKeys validates a keys_file's decoded keys (ParseKeys).
func validateFileKeys(fileKeys []KeyConfig, cfg *Config) ([]KeyConfig, error) {
	if _, err := newFileKeySet(fileKeys, cfg); err != nil {
		return nil, err
	}
	return fileKeys, nil
}

// newFileKeySet is the KeySet of cfg's auth.keys then a keys_file's keys,
// checked together, so that a name or a key given in both is refused; the
// file's problems are reported under keys[i], the config's under
// auth.keys[i].
func newFileKeySet(fileKeys []KeyConfig, cfg *Config) (*KeySet, error) {
	var inline []KeyConfig
	if cfg.Auth != nil {
		inline = cfg.Auth.Keys
	}
	return NewKeySet(inline, fileKeys, cfg)
}

// decodeKeysYAML decodes a keys_file with yaml.v3 and decodeStrict: what
// a keys_file means, and its errors with key paths and lines.
func decodeKeysYAML(data []byte) ([]KeyConfig, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("keys file is empty")
		}
		return nil, fmt.Errorf("keys file is not valid YAML: %w", err)
	}
	var kf keysFile
	if err := decodeStrict(doc.Content[0], reflect.ValueOf(&kf).Elem(), ""); err != nil {
		return nil, err
	}
	return kf.Keys, nil
}

// LoadKeys reads and checks a keys_file (ParseKeys).
func LoadKeys(path string, cfg *Config) ([]KeyConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := ParseKeys(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// loadKeysFile reads a keys_file into the set a gateway makes its table
// of (ReadKeySet, as the keys_file watcher does), with its bytes' digest.
func loadKeysFile(path string, cfg *Config) (*LoadedKeys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	set, err := ReadKeySet(data, cfg, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &LoadedKeys{Set: set, Sum: sha256.Sum256(data)}, nil
}

func sha256Sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }
