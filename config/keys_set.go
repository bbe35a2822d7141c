package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"strconv"
	"strings"
)

// KeySet is a validated list of API keys (a config's auth.keys, then its
// keys_file's) in the shape the gateway keeps them: the names in one
// string, the keys indexed by digest, and each key's profile (models,
// priority, limits, weight), one per distinct profile. ReadKeySet builds
// it from a keys_file as it reads it, key by key: a 100k-key reload
// allocates about what the set holds (no KeyConfig per key, no index
// thrown away), so that it runs beside requests with little garbage.
type KeySet struct {
	names     string  // every key's name, one after another
	ends      []int32 // ends[i]: where key i's name ends in names
	profileOf []int32 // key i's profile, an index into Profiles
	// Profiles are the keys' distinct models, priority, limits and
	// weight (Name, SHA256 and Env unset).
	Profiles []KeyConfig
	// Digests is each key's index by its SHA-256 digest; the set's
	// holder may take it as its own index.
	Digests map[[32]byte]int32
}

// Len is the number of keys.
func (s *KeySet) Len() int { return len(s.ends) }

// Name is key i's name.
func (s *KeySet) Name(i int) string {
	start := int32(0)
	if i > 0 {
		start = s.ends[i-1]
	}
	return s.names[start:s.ends[i]]
}

// Profile is the index in Profiles of key i's profile.
func (s *KeySet) Profile(i int) int { return int(s.profileOf[i]) }

// NewKeySet validates keys then more as one list (a config's auth.keys,
// then its keys_file's: a name or a key given in both is refused; the
// file's problems are named keys[i], the config's auth.keys[i]) and
// returns them as a KeySet.
func NewKeySet(keys, more []KeyConfig, cfg *Config) (*KeySet, error) {
	b := newKeySetBuilder(cfg, fileKeyPath(len(keys)), len(keys)+len(more))
	b.addConfigs(keys, more)
	return b.finish()
}

// ReadKeySet decodes a keys_file's content (as ParseKeys does: the JSON
// decoder, or yaml.v3 for anything it does not read) and validates it
// with cfg's auth.keys in front, as NewKeySet(cfg.Auth.Keys, ParseKeys's
// keys) would, with the same errors; but a file the JSON decoder reads
// goes straight into the set, a key at a time. sizeHint is the number of
// keys the file likely holds (say, the last reading's): the set's index is
// made that large at once.
func ReadKeySet(data []byte, cfg *Config, sizeHint int) (*KeySet, error) {
	var inline []KeyConfig
	if cfg.Auth != nil {
		inline = cfg.Auth.Keys
	}
	b := newKeySetBuilder(cfg, fileKeyPath(len(inline)), len(inline)+sizeHint)
	b.addConfigs(inline, nil)
	s := jsonScanner{b: data, models: map[string]modelsEntry{}, yield: b.yielder.Yield}
	if _, ok := s.document(b.add); ok {
		return b.finish()
	}
	fileKeys, err := decodeKeysYAML(data)
	if err != nil {
		return nil, err
	}
	return newFileKeySet(fileKeys, cfg)
}

// fileKeyPath names key i of a config's inline keys then its keys_file's.
func fileKeyPath(inline int) func(i int) string {
	return func(i int) string {
		if i < inline {
			return fmt.Sprintf("auth.keys[%d]", i)
		}
		return fmt.Sprintf("keys[%d]", i-inline)
	}
}

// keyView is one key as the validation and the set read it: a KeyConfig
// whose texts may alias the bytes of the file it was read from (the JSON
// decoder's), so that reading a key allocates nothing the set does not
// keep. modelsKey tells model lists apart for profiles: the list's JSON
// text (jsonModels), or else ModelsKey's.
type keyView struct {
	name, sha256, env, priority []byte
	models                      []string
	modelsKey                   string
	jsonModels                  bool
	limits                      KeyLimits
	weight                      float64
	weighted                    bool
}

// viewOf is k as a keyView, its texts copied into scratch (reused from
// key to key: no allocation per key).
func viewOf(k *KeyConfig, scratch *[]byte) keyView {
	b := append((*scratch)[:0], k.Name...)
	b = append(b, k.SHA256...)
	b = append(b, k.Env...)
	b = append(b, k.Priority...)
	*scratch = b
	cut := func(n int) []byte { t := b[:n:n]; b = b[n:]; return t }
	v := keyView{name: cut(len(k.Name)), sha256: cut(len(k.SHA256)), env: cut(len(k.Env)), priority: cut(len(k.Priority)),
		models: k.Models, modelsKey: ModelsKey(k.Models), limits: k.Limits}
	if k.Weight != nil {
		v.weight, v.weighted = *k.Weight, true
	}
	return v
}

// config is v as a KeyConfig, its texts copied.
func (v *keyView) config() KeyConfig {
	k := KeyConfig{Name: string(v.name), SHA256: string(v.sha256), Env: string(v.env), Models: v.models, Priority: string(v.priority), Limits: v.limits}
	if v.weighted {
		w := v.weight
		k.Weight = &w
	}
	return k
}

// ModelsKey is a model list as one string, equal for equal lists and
// only for them: the name itself for one model (no allocation: the usual
// case), else each name after its length. The key set's profiles and the
// gateway's are told apart by it.
func ModelsKey(models []string) string {
	if len(models) == 1 {
		return models[0]
	}
	var b strings.Builder
	for _, m := range models {
		b.WriteString(strconv.Itoa(len(m)))
		b.WriteByte(':')
		b.WriteString(m)
	}
	return b.String()
}

// digest is the key's SHA-256 digest, as KeyConfig.Digest.
func (v *keyView) digest() ([32]byte, error) {
	var d [32]byte
	if len(v.env) != 0 {
		val, ok := os.LookupEnv(string(v.env))
		if !ok || val == "" {
			return d, fmt.Errorf("environment variable %s is not set", v.env)
		}
		return sha256Sum(val), nil
	}
	if !decodeHex32(&d, v.sha256) {
		return d, fmt.Errorf("want 64 hex digits, got %q", v.sha256)
	}
	return d, nil
}

// decodeHex32 decodes 64 hex digits (either case) into d, without
// allocating (encoding/hex's table: about three times faster on a
// 100k-key file than a loop of comparisons).
func decodeHex32(d *[32]byte, b []byte) bool {
	if len(b) != 64 {
		return false
	}
	n, err := hex.Decode(d[:], b)
	return n == 32 && err == nil
}

// profileID tells profiles apart in a set: the models (their count and
// modelsKey), priority, limits and weight.
type profileID struct {
	n          int
	models     string
	jsonModels bool
	priority   string
	limits     KeyLimits
	weight     float64
	weighted   bool
}

// keySetBuilder validates keys one at a time (add) and builds their set.
// Problems are named by pathOf(i) and made only for problems: a 100k-key
// file that is fine costs no formatting.
type keySetBuilder struct {
	cfg     *Config
	classes map[string]bool
	pathOf  func(i int) string
	errs    []error
	n       int
	yielder KeyYielder

	names     strings.Builder
	ends      []int32
	byName    nameIndex
	digests   map[[32]byte]int32
	profileOf []int32
	profiles  []KeyConfig
	byProfile map[profileID]int32
	last      lastProfile
	prios     map[string]string
}

// lastProfile is the previous key's profile.
type lastProfile struct {
	id    profileID
	index int32
	set   bool
}

// keyIndexHint caps the size the digest index is made at: a map made for
// 100k entries at once is one runtime call of ~17 ms on a busy core, which
// nothing preempts (the runtime trace of a reload beside requests showed
// it as the longest run on a P); from this size, one table's worth, it
// grows a table at a time as keys come.
const keyIndexHint = 896

func newKeySetBuilder(cfg *Config, pathOf func(i int) string, sizeHint int) *keySetBuilder {
	b := &keySetBuilder{cfg: cfg, classes: map[string]bool{}, pathOf: pathOf,
		ends: make([]int32, 0, sizeHint), profileOf: make([]int32, 0, sizeHint),
		digests: make(map[[32]byte]int32, min(sizeHint, keyIndexHint)), byProfile: map[profileID]int32{}, prios: map[string]string{}}
	for _, pc := range cfg.PriorityClasses {
		b.classes[pc] = true
	}
	b.byName.init(sizeHint)
	return b
}

// addConfigs adds keys then more, yielding every KeyYieldEvery keys.
func (b *keySetBuilder) addConfigs(keys, more []KeyConfig) {
	var scratch []byte
	for _, list := range [][]KeyConfig{keys, more} {
		for i := range list {
			v := viewOf(&list[i], &scratch)
			b.add(&v)
			if b.n%KeyYieldEvery == 0 {
				b.yielder.Yield() // beside requests
			}
		}
	}
}

func (b *keySetBuilder) problem(i int, field, format string, args ...any) {
	b.errs = append(b.errs, &FieldError{Path: b.pathOf(i) + field, Msg: fmt.Sprintf(format, args...)})
}

// add validates the next key and puts it in the set.
func (b *keySetBuilder) add(v *keyView) {
	i := b.n
	b.n++
	b.names.Write(v.name)
	b.ends = append(b.ends, int32(b.names.Len()))
	if len(v.name) == 0 {
		b.problem(i, ".name", "is required")
	} else if j, dup := b.byName.find(v.name, b.nameBytes); dup {
		b.problem(i, ".name", "%q is already %s.name", v.name, b.pathOf(j))
	} else {
		b.byName.insert(v.name, i, b.nameBytes)
	}
	switch {
	case (len(v.sha256) == 0) == (len(v.env) == 0):
		b.problem(i, "", "want exactly one of sha256 and env")
	case len(v.env) != 0:
		if val, ok := os.LookupEnv(string(v.env)); !ok || val == "" {
			b.problem(i, ".env", "environment variable %s is not set", v.env)
		}
	}
	if d, err := v.digest(); err == nil {
		if j, dup := b.digests[d]; dup {
			b.problem(i, "", "the same key as %s", b.pathOf(int(j)))
		}
		b.digests[d] = int32(i)
	} else if len(v.sha256) != 0 {
		b.problem(i, ".sha256", "%v", err)
	}
	b.validateFields(v, i)
	b.profileOf = append(b.profileOf, b.profile(v))
}

// nameBytes is key i's name as added so far (for the name index).
func (b *keySetBuilder) nameBytes(i int) string {
	start := int32(0)
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.names.String()[start:b.ends[i]]
}

// validateFields checks what one key holds on its own: its models,
// priority, weight and limits.
func (b *keySetBuilder) validateFields(v *keyView, i int) {
	if len(v.models) == 0 {
		b.problem(i, ".models", `at least one model is required ("*" for all)`)
	}
	for j, m := range v.models {
		if m == "" {
			b.problem(i, fmt.Sprintf(".models[%d]", j), "must not be empty")
		}
	}
	if len(v.priority) != 0 && !b.classes[string(v.priority)] {
		b.problem(i, ".priority", "%q is not one of priority_classes %v", v.priority, b.cfg.PriorityClasses)
	}
	if v.weighted && !positiveNumber(v.weight) {
		b.problem(i, ".weight", "want a positive number, got %v", v.weight)
	}
	l := v.limits
	if l.RequestsPerMinute < 0 || l.TokensPerMinute < 0 || l.MaxConcurrent < 0 || l.TokensPerDay < 0 {
		b.problem(i, ".limits", "must not be negative (0: no limit)")
	}
}

// profile is the index of v's profile, added when it is new. A key with
// the previous key's profile (most keys of a large file) takes it without
// a lookup.
func (b *keySetBuilder) profile(v *keyView) int32 {
	if l := &b.last; l.set && l.id.n == len(v.models) && l.id.models == v.modelsKey && l.id.jsonModels == v.jsonModels && l.id.priority == string(v.priority) &&
		l.id.limits == v.limits && l.id.weight == v.weight && l.id.weighted == v.weighted {
		return l.index
	}
	prio, ok := b.prios[string(v.priority)]
	if !ok {
		prio = string(v.priority)
		b.prios[prio] = prio
	}
	id := profileID{n: len(v.models), models: v.modelsKey, jsonModels: v.jsonModels, priority: prio, limits: v.limits, weight: v.weight, weighted: v.weighted}
	p, ok := b.byProfile[id]
	if !ok {
		p = b.newProfile(v, prio)
		b.byProfile[id] = p
	}
	b.last = lastProfile{id: id, index: p, set: true}
	return p
}

// newProfile adds v's profile, its priority prio.
func (b *keySetBuilder) newProfile(v *keyView, prio string) int32 {
	p := KeyConfig{Models: v.models, Priority: prio, Limits: v.limits}
	if v.weighted {
		w := v.weight
		p.Weight = &w
	}
	b.profiles = append(b.profiles, p)
	return int32(len(b.profiles) - 1)
}

// finish is the set, or every problem found, joined.
func (b *keySetBuilder) finish() (*KeySet, error) {
	if err := errors.Join(b.errs...); err != nil {
		return nil, err
	}
	return &KeySet{names: b.names.String(), ends: b.ends, profileOf: b.profileOf, Profiles: b.profiles, Digests: b.digests}, nil
}

// nameIndex finds a key by its name among those added: open addressing
// over the keys' indexes (pointer-free, so the collector has nothing to
// walk in it), each slot holding its name's hash's high half beside the
// index, so that a probe reads a name (from the set's names) only when
// their hashes match.
type nameIndex struct {
	seed  maphash.Seed
	slots []uint64 // the name's hash's high 32 bits, then key index + 1; 0: empty
	n     int
}

func (x *nameIndex) init(sizeHint int) {
	x.seed = maphash.MakeSeed()
	size := 16
	for size < 2*sizeHint {
		size *= 2
	}
	x.slots = make([]uint64, size)
}

// find is the index of the key named name (nameOf(i) is key i's name).
func (x *nameIndex) find(name []byte, nameOf func(i int) string) (int, bool) {
	hash := maphash.Bytes(x.seed, name)
	mask := len(x.slots) - 1
	for h := int(hash) & mask; ; h = (h + 1) & mask {
		s := x.slots[h]
		if s == 0 {
			return 0, false
		}
		if s>>32 == hash>>32 && nameOf(int(uint32(s)-1)) == string(name) {
			return int(uint32(s) - 1), true
		}
	}
}

// insert adds key i, named name (not in the index yet).
func (x *nameIndex) insert(name []byte, i int, nameOf func(i int) string) {
	if 2*(x.n+1) > len(x.slots) {
		old := x.slots
		x.slots = make([]uint64, 2*len(old))
		for _, s := range old {
			if s != 0 {
				x.place(maphash.String(x.seed, nameOf(int(uint32(s)-1))), uint32(s))
			}
		}
	}
	x.place(maphash.Bytes(x.seed, name), uint32(i+1))
	x.n++
}

// place puts the slot of hash and key index+1 s in its place.
func (x *nameIndex) place(hash uint64, s uint32) {
	mask := len(x.slots) - 1
	h := int(hash) & mask
	for x.slots[h] != 0 {
		h = (h + 1) & mask
	}
	x.slots[h] = hash>>32<<32 | uint64(s)
}
