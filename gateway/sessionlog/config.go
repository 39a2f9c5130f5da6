package sessionlog

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/parleyhq/parley/schema"
)

// Config says where events go and how much the spool may hold.
type Config struct {
	// Brokers are the bootstrap addresses of the Kafka cluster, host:port.
	Brokers []string
	// Topic receives the events; schema.SessionsTopic by default.
	Topic string
	// AllowAutoTopicCreation lets the first write create Topic on brokers
	// that allow it (the embedded broker of `parley dev` does).
	AllowAutoTopicCreation bool

	// SpoolDir holds the spool's segment files. One Logger at a time may
	// use a directory; a second is refused.
	SpoolDir string
	// SpoolMaxBytes bounds the events waiting in the spool; Publish returns
	// ErrSpoolFull beyond it. The disk may hold up to one more segment of
	// delivered events until that segment is deleted.
	SpoolMaxBytes int64
	// SegmentBytes is the size at which the spool starts a new segment file.
	SegmentBytes int64
	// CommitWindow is how long an accepted event may wait for the fsync
	// that puts it on the disk for good. 0: Publish returns only after that
	// fsync (concurrent publishes share one), so an event it accepted
	// survives a power loss. Positive: Publish returns once the event is
	// written to the spool's segment file, where it survives the gateway
	// process dying, and a background commit fsyncs every event written
	// within the window together, each within the window plus two fsyncs of
	// its Publish; a power loss or kernel crash can lose those.
	CommitWindow time.Duration

	// BatchMaxEvents and BatchMaxBytes bound one write to Kafka.
	BatchMaxEvents int
	BatchMaxBytes  int64
	// Linger is how long the drain, woken by a Publish into an empty spool
	// or done with a batch that read the spool to its end, waits for more
	// events before it writes to Kafka, so that events go out in batches
	// rather than one produce request for every few.
	Linger time.Duration
	// WriteTimeout bounds one write to Kafka, acknowledgement included.
	WriteTimeout time.Duration
	// RetryBackoffMin and RetryBackoffMax bound the wait between failed
	// writes; it doubles from the first to the second.
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
	// CloseTimeout bounds how long Close tries to deliver the backlog
	// before leaving it on disk; 0 leaves it without trying.
	CloseTimeout time.Duration
}

// DefaultConfig writes to schema.SessionsTopic with a 1 GiB spool of 16 MiB
// segments, acknowledges an event only after the fsync it shares with the
// events published beside it (no commit window), and batches a trickle of events
// over 10 ms; Brokers and SpoolDir must be set.
func DefaultConfig() Config {
	return Config{
		Topic:                  schema.SessionsTopic,
		AllowAutoTopicCreation: true,
		SpoolMaxBytes:          1 << 30,
		SegmentBytes:           16 << 20,
		CommitWindow:           0,
		BatchMaxEvents:         1000,
		BatchMaxBytes:          512 << 10,
		Linger:                 10 * time.Millisecond,
		WriteTimeout:           10 * time.Second,
		RetryBackoffMin:        100 * time.Millisecond,
		RetryBackoffMax:        5 * time.Second,
		CloseTimeout:           5 * time.Second,
	}
}

// Validate reports the first field that is missing or out of range.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("sessionlog: at least one broker is required")
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("sessionlog: broker %q is not host:port: %w", b, err)
		}
	}
	switch {
	case c.Topic == "":
		return errors.New("sessionlog: topic is required")
	case c.SpoolDir == "":
		return errors.New("sessionlog: spool dir is required")
	case c.SpoolMaxBytes <= 0:
		return fmt.Errorf("sessionlog: spool max bytes %d must be positive", c.SpoolMaxBytes)
	case c.SegmentBytes <= 0 || c.SegmentBytes > c.SpoolMaxBytes:
		return fmt.Errorf("sessionlog: segment bytes %d must be positive and at most spool max bytes %d", c.SegmentBytes, c.SpoolMaxBytes)
	case c.CommitWindow < 0:
		return fmt.Errorf("sessionlog: commit window %s must not be negative", c.CommitWindow)
	case c.BatchMaxEvents < 1:
		return fmt.Errorf("sessionlog: batch max events %d must be at least 1", c.BatchMaxEvents)
	case c.BatchMaxBytes < 1:
		return fmt.Errorf("sessionlog: batch max bytes %d must be at least 1", c.BatchMaxBytes)
	case c.Linger < 0:
		return fmt.Errorf("sessionlog: linger %s must not be negative", c.Linger)
	case c.WriteTimeout <= 0:
		return fmt.Errorf("sessionlog: write timeout %s must be positive", c.WriteTimeout)
	case c.RetryBackoffMin <= 0 || c.RetryBackoffMax < c.RetryBackoffMin:
		return fmt.Errorf("sessionlog: retry backoff %s..%s must be positive and ordered", c.RetryBackoffMin, c.RetryBackoffMax)
	case c.CloseTimeout < 0:
		return fmt.Errorf("sessionlog: close timeout %s must not be negative", c.CloseTimeout)
	}
	return nil
}
