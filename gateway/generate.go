package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/parleyhq/parley/inference"
	"github.com/parleyhq/parley/schema"
)

// stopIDs are the special tokens that end an NPC reply: in Parley's layout
// the end of its turn or the start of anyone else's, with a chat template
// the model's end-of-turn and end-of-sequence tokens (ChatFormat.Stop).
func stopIDs(chat *inference.ChatFormat) []int {
	if chat.Template() != nil {
		return chat.Stop()
	}
	tok := chat.Tokenizer()
	var ids []int
	for _, s := range []string{inference.TokEnd, inference.TokUser, inference.TokSys, inference.TokNPC,
		inference.TokPad, inference.TokContinue, inference.TokTerminate} {
		if id, ok := tok.TokenID(s); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// generated is the outcome of one generation.
type generated struct {
	Text       string
	Completion Completion
	TTFT       time.Duration
}

// generate runs req on gen and calls onPiece with each valid UTF-8 piece of
// the reply as it comes (onPiece may be nil). If onPiece fails (the client
// went away) generation is cancelled and errClientCancelled returned.
func (s *Server) generate(ctx context.Context, gen Generator, req GenerateRequest, onPiece func(string) error) (generated, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	st, err := gen.Generate(ctx, req)
	if err != nil {
		return generated{}, fmt.Errorf("generate: %w", err)
	}
	var out generated
	var b strings.Builder
	var ch utf8Chunker
	var writeErr error
	emit := func(piece string) {
		if piece == "" || writeErr != nil {
			return
		}
		b.WriteString(piece)
		if onPiece != nil {
			if writeErr = onPiece(piece); writeErr != nil {
				cancel()
			}
		}
	}
	for {
		text, ok := st.Next()
		if !ok {
			break
		}
		if out.TTFT == 0 {
			out.TTFT = time.Since(start)
			s.metrics.ttft.Record(ctx, out.TTFT.Seconds())
		}
		emit(ch.push(text))
	}
	emit(ch.flush())
	comp, err := st.Wait()
	out.Text, out.Completion = b.String(), comp
	switch {
	case writeErr != nil:
		return out, fmt.Errorf("%w: %w", errClientCancelled, writeErr)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return out, ErrRequestTimeout
	case ctx.Err() != nil:
		return out, fmt.Errorf("%w: %w", errClientCancelled, ctx.Err())
	case err != nil:
		return out, fmt.Errorf("generate: %w", err)
	}
	return out, nil
}

// wantsSSE reports whether the client asked for a server-sent event stream.
func wantsSSE(c echo.Context) bool {
	return strings.Contains(c.Request().Header.Get(echo.HeaderAccept), "text/event-stream")
}

// sseWriter writes server-sent events to a response.
type sseWriter struct {
	c       echo.Context
	started bool
}

func (w *sseWriter) start() {
	if w.started {
		return
	}
	h := w.c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.c.Response().WriteHeader(http.StatusOK)
	w.started = true
}

// send writes one event: "event: name" (when name is set) and "data: v" with
// v as JSON, or as it is when it is a string.
func (w *sseWriter) send(name string, v any) error {
	w.start()
	var data []byte
	if s, ok := v.(string); ok {
		data = []byte(s)
	} else {
		var err error
		if data, err = json.Marshal(v); err != nil {
			return fmt.Errorf("encode event %s: %w", name, err)
		}
	}
	var b strings.Builder
	if name != "" {
		b.WriteString("event: " + name + "\n")
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	if _, err := w.c.Response().Write([]byte(b.String())); err != nil {
		return fmt.Errorf("write event %s: %w", name, err)
	}
	w.c.Response().Flush()
	return nil
}

// fail ends a started stream with an "error" event; before the stream
// started it returns err for the error handler.
func (w *sseWriter) fail(s *Server, err error) error {
	if !w.started || errors.Is(err, errClientCancelled) {
		return err
	}
	status, code := errorStatus(err)
	msg := err.Error()
	if status >= 500 && status != http.StatusServiceUnavailable && status != http.StatusGatewayTimeout {
		s.log.Error("stream failed", "route", w.c.Path(), "err", err)
		msg = "internal error"
	}
	_ = w.send("error", schema.ErrorBody{Error: schema.ErrorDetail{Code: code, Message: msg}})
	return nil
}
