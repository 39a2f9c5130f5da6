// Package broker starts the embedded Kafka-protocol broker (kfake) that
// `parley dev` and the tests run Parley against: the real wire protocol on
// loopback, so kafka-go clients work against it unchanged.
package broker

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
)

// New starts an embedded Kafka-protocol broker on 127.0.0.1:port (0
// picks a free port) that keeps its log under dataDir (in memory when empty),
// fsyncs every batch, and creates topics on first use with 3 partitions.
func New(port int, dataDir string) (*kfake.Cluster, error) {
	opts := []kfake.Opt{
		kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3),
	}
	if dataDir != "" {
		opts = append(opts, kfake.DataDir(dataDir), kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start kafka broker on port %d: %w", port, err)
	}
	return c, nil
}
