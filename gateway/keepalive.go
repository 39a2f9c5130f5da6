package gateway

import (
	"sync"
	"time"
)

// keepAliveComment is the SSE comment sent while a reply has not started;
// clients ignore it, proxies and idle timeouts see a live stream.
const keepAliveComment = ": keep-alive\n\n"

// keepAlive writes keepAliveComment on w every interval (starting the
// stream at the first one) until the returned stop is called. stop waits
// for the writer to finish, so the caller may write to w once it returns;
// it may be called more than once. An interval of 0 sends nothing.
func keepAlive(w *sseWriter, every time.Duration) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				w.start()
				if _, err := w.c.Response().Write([]byte(keepAliveComment)); err != nil {
					return
				}
				w.c.Response().Flush()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit); <-done })
	}
}
