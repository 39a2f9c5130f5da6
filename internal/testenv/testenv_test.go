package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestRedisStartsAndRestarts(t *testing.T) {
	r := StartRedis(t)
	ctx := context.Background()
	key := r.Prefix + "k"
	if err := r.Client.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, _ := r.Client.Get(ctx, key).Result(); got != "v" {
		t.Fatalf("GET = %q; want v", got)
	}
	if r.cmd == nil {
		t.Skip("REDIS_ADDR is set: restart is not tested against an external server")
	}
	r.Stop()
	if err := r.Client.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Stop succeeded; want an error")
	}
	r.Start()
	if err := r.Client.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
}

// TestKafkaGoAgainstBroker proves that segmentio/kafka-go's Writer and a
// consumer-group Reader work against the embedded broker end to end: produce,
// consume and commit part, close, resume from the committed offset in a new
// reader, across a broker restart too.
func TestKafkaGoAgainstBroker(t *testing.T) {
	k := StartKafka(t)
	topic, group := k.Topic("smoke"), k.Prefix+"group"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	w := &kafka.Writer{Addr: kafka.TCP(k.Addrs...), Topic: topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, AllowAutoTopicCreation: true, BatchTimeout: 10 * time.Millisecond}
	const total = 100
	var msgs []kafka.Message
	for i := range total {
		msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "session-%d", i%7), Value: fmt.Appendf(nil, "%d", i)})
	}
	for {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("write: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // topic creation is asynchronous
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	consume := func(n int) {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Addrs, GroupID: group, Topic: topic,
			MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset})
		defer r.Close()
		for range n {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				t.Fatalf("fetch after %d records: %v", len(seen), err)
			}
			if seen[string(m.Value)] {
				t.Fatalf("record %s delivered twice", m.Value)
			}
			seen[string(m.Value)] = true
			if err := r.CommitMessages(ctx, m); err != nil {
				t.Fatalf("commit: %v", err)
			}
		}
	}
	consume(60)
	k.Stop()
	k.Start()
	consume(total - 60)
	if len(seen) != total {
		t.Fatalf("consumed %d distinct records; want %d", len(seen), total)
	}

	// Nothing further is delivered to the group.
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: k.Addrs, GroupID: group, Topic: topic, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	if m, err := r.FetchMessage(short); err == nil {
		t.Fatalf("fetched %s after every record was committed; want nothing", m.Value)
	}
}
