package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
)

// fileState is what a file watcher last read: the keys_file's (reloadKeys)
// and the config file's (WatchFile).
type fileState struct {
	sum     [32]byte
	missing bool
	// info is the file as stat saw it before its last read, and unread
	// the polls since that found it the same and skipped reading it.
	info   os.FileInfo
	unread int
	// readFile reads the file (nil: os.ReadFile; tests count the reads).
	readFile func(string) ([]byte, error)
	// held is the digest of the content last put off as unfinished
	// (holdUnfinished).
	held [32]byte
}

// fullReadEvery is how many polls in a row may skip reading a file whose
// stat (the same file, size and modification time) has not changed: a
// filesystem with coarse modification times could hide an edit in place
// that keeps the size, so the file is read and hashed at least this often
// anyway. A 100k-key keys_file is ~19 MB: reading and hashing it at every
// 500 ms poll cost an idle gateway ~40 MB/s of SHA-256.
const fullReadEvery = 20

// poll reads path once and returns its content when it differs from what
// was read last. The file is read by path each time and compared by
// content, so an edit in place, a rename over it and a Kubernetes
// ConfigMap update (a symlink swapped to a new folder) are all seen; a
// poll that finds the file's stat as it was before the last read skips the
// read (at most fullReadEvery-1 times in a row) and reports it unchanged,
// with no data. A missing file (a ConfigMap swap can leave the path
// missing for an instant) is reported once (missingNow), and read again
// next time.
func (s *fileState) poll(path string) (data []byte, changed, missingNow bool, err error) {
	fi, statErr := os.Stat(path)
	if statErr == nil && s.info != nil && s.unread < fullReadEvery-1 && !s.missing && os.SameFile(fi, s.info) &&
		fi.Size() == s.info.Size() && fi.ModTime().Equal(s.info.ModTime()) {
		s.unread++
		return nil, false, false, nil
	}
	read := s.readFile
	if read == nil {
		read = os.ReadFile
	}
	data, err = read(path)
	if err != nil {
		s.info = nil
		if !errors.Is(err, os.ErrNotExist) || s.missing {
			return nil, false, false, err
		}
		s.missing = true
		return nil, false, true, err
	}
	s.missing, s.unread = false, 0
	s.info = fi // taken before the read: a write after it changes the next stat
	if statErr != nil {
		s.info = nil
	}
	sum := sumYielding(data)
	if sum == s.sum {
		return data, false, false, nil
	}
	s.sum = sum
	return data, true, false, nil
}

// sumYielding is the SHA-256 of data, yielding to the scheduler every
// MiB: the hash of a 19 MB keys_file is one assembly loop the runtime
// cannot preempt, which held a core for 10-50 ms beside requests.
func sumYielding(data []byte) [32]byte {
	const chunk = 1 << 20
	if len(data) <= chunk {
		return sha256.Sum256(data)
	}
	h := sha256.New()
	for len(data) > 0 {
		n := min(chunk, len(data))
		h.Write(data[:n])
		data = data[n:]
		config.YieldToWaiting()
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// holdUnfinished reports whether data, just read as changed, looks cut
// short (unfinishedJSON: a file read while it is being written) and is
// new: then the poll forgets it read it, so that the next poll reads the
// file again, and the caller waits for that. A file that reads the same
// twice is taken as it is (and refused, if it is broken). A keys_file
// read in the middle of its writing went to yaml.v3, whose reading of a
// partial 100k-key file is seconds of CPU beside requests, to be refused.
func (s *fileState) holdUnfinished(data []byte) bool {
	if !unfinishedJSON(data) || s.sum == s.held {
		s.held = [32]byte{} // taken: the same cut, written again later, is held again
		return false
	}
	s.held, s.sum, s.info = s.sum, [32]byte{}, nil
	return true
}

// unfinishedJSON: data begins as a JSON object does and does not end as
// one does (its last byte past whitespace is not a closing brace).
func unfinishedJSON(data []byte) bool {
	b := bytes.TrimSpace(data)
	return len(b) > 0 && b[0] == '{' && b[len(b)-1] != '}'
}

// WatchFile polls path every interval until ctx is done, as the keys_file
// is watched (fileState.poll), and calls changed with the new content once
// it has changed and then read the same at the next poll (debounced: a
// file written in several steps is taken whole). initial is the content
// already in force.
func WatchFile(ctx context.Context, path string, every time.Duration, initial []byte, changed func(data []byte)) {
	s := fileState{sum: sha256.Sum256(initial)}
	var pending []byte
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, differs, _, err := s.poll(path)
		switch {
		case err != nil:
		case differs:
			pending = data // wait one poll: it must read the same again
		case pending != nil: // read (or stat) the same again: taken whole
			data, pending = pending, nil
			changed(data)
		}
	}
}

// keysPollInterval is how often the keys_file is re-read.
const keysPollInterval = 500 * time.Millisecond

// WatchKeys re-reads auth.keys_file every 500 ms until ctx is done, and
// puts its keys in force when its content changed. The file is read by
// path each time and compared by content, so an edit in place, a rename
// over it and a Kubernetes ConfigMap update (a symlink swapped to a new
// folder) are all seen. A file that fails to parse or validate is refused
// with a log naming the key path; the keys in force keep serving. It
// returns at once when there is no keys_file.
func (g *Gateway) WatchKeys(ctx context.Context) {
	g.watchKeys(ctx, keysPollInterval)
}

func (g *Gateway) watchKeys(ctx context.Context, every time.Duration) {
	a := g.conf().Auth
	if a == nil || a.KeysFile == "" {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.reloadKeys()
	}
}

// reloadKeys reads the keys_file once and puts it in force if it changed.
func (g *Gateway) reloadKeys() {
	g.keysMu.Lock()
	defer g.keysMu.Unlock()
	a := g.conf().Auth
	data, changed, missing, err := g.keysFile.poll(a.KeysFile)
	if missing {
		g.log.Warn("keys_file unreadable; the keys in force keep serving", zap.String("keys_file", a.KeysFile), zap.Error(err))
	}
	if !changed || g.keysFile.holdUnfinished(data) {
		return
	}
	// The keys are read straight into the set the table is made of, sized
	// as the table in force (a reload rarely changes the count much).
	hint := 0
	if t := g.keys.Load(); t != nil {
		hint = max(0, len(t.keys)-len(a.Keys))
	}
	ks, err := config.ReadKeySet(data, g.conf(), hint)
	if err != nil {
		g.metrics.keyReloads.WithLabelValues("refused").Inc()
		g.log.Error("keys_file refused; the keys in force keep serving", zap.String("keys_file", a.KeysFile), zap.String("error", err.Error()))
		return
	}
	g.setKeys(ks)
	g.metrics.keyReloads.WithLabelValues("loaded").Inc()
	g.log.Info("keys_file loaded", zap.String("keys_file", a.KeysFile), zap.Int("keys", ks.Len()))
}
