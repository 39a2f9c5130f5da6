// Command parley is Parley's single binary: the dev stack, the gateway, the
// learner, live-ops control, the bots, training, experiments and benchmarks.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "parley:", err)
		stop()
		os.Exit(1)
	}
}
