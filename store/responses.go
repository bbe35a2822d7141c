package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/maitred-dev/maitred/admission"
)

// ResponseTTL is how long the store keeps the owner of a stored Responses
// API response after it was created.
const ResponseTTL = 24 * time.Hour

// maxResponseID bounds the ids the store keeps (vLLM's are "resp_" and 32
// hex digits; a client-chosen one could be anything).
const maxResponseID = 256

// responseKey is the string holding a response's owner.
func responseKey(id string) string { return prefix + "r:" + id }

var _ admission.ResponseOwners = (*Store)(nil)

// responseRecord is a response owner as the store writes it.
type responseRecord struct {
	Key     string `json:"k"`
	Model   string `json:"m"`
	Backend string `json:"b"`
}

// PutResponseOwner implements admission.ResponseOwners: one SET with
// ResponseTTL. While the store is down nothing is written (the caller
// keeps its own record): admission.ErrStoreDown.
func (s *Store) PutResponseOwner(ctx context.Context, id string, o admission.ResponseOwner) error {
	if len(id) > maxResponseID || id == "" {
		return errors.New("response id too long to record")
	}
	if !s.State().Up {
		return admission.ErrStoreDown
	}
	v, err := json.Marshal(responseRecord{Key: o.Key, Model: o.Model, Backend: o.Backend})
	if err != nil {
		return err
	}
	c, cancel := context.WithTimeout(ctx, s.cfg.Timeout.D())
	err = s.rdb.Set(c, responseKey(id), v, ResponseTTL).Err()
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.fail(err)
		return errors.Join(admission.ErrStoreDown, err)
	}
	return nil
}

// ResponseOwner implements admission.ResponseOwners: one GET. While the
// store is down it answers admission.ErrStoreDown at once.
func (s *Store) ResponseOwner(ctx context.Context, id string) (admission.ResponseOwner, bool, error) {
	if len(id) > maxResponseID || id == "" {
		return admission.ResponseOwner{}, false, nil
	}
	if !s.State().Up {
		return admission.ResponseOwner{}, false, admission.ErrStoreDown
	}
	c, cancel := context.WithTimeout(ctx, s.cfg.Timeout.D())
	v, err := s.rdb.Get(c, responseKey(id)).Bytes()
	cancel()
	switch {
	case errors.Is(err, redis.Nil):
		return admission.ResponseOwner{}, false, nil
	case err != nil:
		if ctx.Err() != nil {
			return admission.ResponseOwner{}, false, ctx.Err()
		}
		s.fail(err)
		return admission.ResponseOwner{}, false, errors.Join(admission.ErrStoreDown, err)
	}
	var r responseRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return admission.ResponseOwner{}, false, err
	}
	return admission.ResponseOwner{Key: r.Key, Model: r.Model, Backend: r.Backend}, true, nil
}
