package sessionlog

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/testenv"
)

// BenchmarkPublish measures Publish (validate, encode, append, fsync) with
// nothing draining the spool and with a broker on loopback taking the events
// as they come, serially and from 32×GOMAXPROCS goroutines (which share fsyncs).
// With the broker it also reports how fast events reach Kafka end to end.
//
//	go test -run '^$' -bench Publish ./gateway/sessionlog/
func BenchmarkPublish(b *testing.B) {
	for _, tc := range []struct {
		name     string
		broker   bool
		parallel bool
	}{
		{"spool", false, false},
		{"spool-parallel", false, true},
		{"broker-up", true, false},
		{"broker-up-parallel", true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			brokers, topic := []string{"127.0.0.1:9"}, "bench"
			if tc.broker {
				k := testenv.StartKafka(b)
				brokers, topic = k.Addrs, k.Topic("sessions")
			}
			cfg := testConfig(brokers, topic, b.TempDir())
			cfg.CloseTimeout = 0
			h := newHarness(b, cfg)
			if tc.broker {
				h.run(b)
			}
			evs := makeEvents(b, "bench", 64, 62) // 4096 events
			ctx := context.Background()
			start := time.Now()
			b.ResetTimer()
			if tc.parallel {
				// Many request goroutines, as a gateway serving many sessions has.
				b.SetParallelism(32)
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := h.Publish(ctx, evs[int(next.Add(1))%len(evs)]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for i := range b.N {
					if err := h.Publish(ctx, evs[i%len(evs)]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "published/s")
			if tc.broker {
				h.waitDrained(b)
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "delivered/s")
			}
		})
	}
}

// BenchmarkEncodeEvent compares appendEvent with json.Marshal on a turn event.
//
//	go test -run '^$' -bench EncodeEvent ./gateway/sessionlog/
func BenchmarkEncodeEvent(b *testing.B) {
	ev := makeEvents(b, "bench", 1, 1)[1]
	b.Run("appendEvent", func(b *testing.B) {
		for b.Loop() {
			if _, err := appendEvent(make([]byte, 0, 512), &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
