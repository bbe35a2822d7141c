package kvevents

import "testing"

// FuzzDecode: any bytes decode to a batch or an error, never a panic; a
// batch decoded holds only what its payload could carry. Seeds: the hand
// vectors and testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(arrayBatch))
	f.Add([]byte(mapBatch()))
	f.Fuzz(func(t *testing.T, b []byte) {
		batch, err := Decode(b)
		if err != nil {
			return
		}
		n := 0
		for _, e := range batch.Events {
			n += len(e.BlockHashes) + len(e.TokenIDs)
			for _, id := range e.TokenIDs {
				if id < 0 {
					t.Fatalf("negative token id %d", id)
				}
			}
		}
		if n > len(b) {
			t.Fatalf("%d values out of %d bytes", n, len(b))
		}
	})
}
