package quota

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// The limits of the benchmarks never refuse: they measure the admitted
// path, a Reserve and its Settle, with every kind of limit checked.
var benchLimits = Limits{RequestsPerMinute: 1 << 40, TokensPerMinute: 1 << 50, TokensPerDay: 1 << 60, MaxConcurrent: 1 << 20}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("team-%04d", i)
	}
	return keys
}

func BenchmarkReserveSettle(b *testing.B) {
	for _, n := range []int{1, 1000} {
		keys := benchKeys(n)
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			l := NewLocal(time.Now)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r, err := l.Reserve(ctx, keys[i%n], benchLimits, 1200)
				if err != nil {
					b.Fatal(err)
				}
				r.Settle(900)
				i++
			}
		})
		b.Run(fmt.Sprintf("keys=%d/parallel", n), func(b *testing.B) {
			l := NewLocal(time.Now)
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1)) * 7919
				for pb.Next() {
					r, err := l.Reserve(ctx, keys[i%n], benchLimits, 1200)
					if err != nil {
						b.Error(err)
						return
					}
					r.Settle(900)
					i++
				}
			})
		})
	}
}
