package main

import "github.com/spf13/pflag"

// redisFlags binds the three flags that name a Redis: one server, the
// sentinels of a primary, or the nodes of a cluster. usage says what the
// Redis is for.
func redisFlags(f *pflag.FlagSet, addr, masterName *string, cluster *bool, usage string) {
	f.StringVar(addr, "redis-addr", *addr, usage+": host:port, or host:port,... of the sentinels (with --redis-master-name) or of cluster nodes (with --redis-cluster)")
	f.StringVar(masterName, "redis-master-name", *masterName, "name of the Redis primary the sentinels at --redis-addr watch (enables Sentinel failover)")
	f.BoolVar(cluster, "redis-cluster", *cluster, "--redis-addr names nodes of a Redis Cluster")
}
