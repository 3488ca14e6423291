package mcp

import (
	"context"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// oneByte reads one byte at a time: an event split across every read.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

// TestCountingBodyCountsLogMessages: an event stream passes through as it is, and each
// of its log messages and progress notifications is counted once, whatever the
// encoder's spacing, line endings, data lines or size, and however the reads split it;
// other messages are not.
func TestCountingBodyCountsLogMessages(t *testing.T) {
	long := `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"` + strings.Repeat("x", 2*maxEventScan) + `"}}`
	stream := strings.Join([]string{
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"one\"}}\n\n",
		"data: {\"jsonrpc\": \"2.0\", \"method\": \"notifications/message\", \"params\": {\"data\": \"two\"}}\r\n\r\n",
		"data: {\"jsonrpc\":\"2.0\",\n",
		"data: \"method\":\"notifications/message\",\"params\":{\"data\":\"three\"}}\n\n",
		"data: " + long + "\n\n",
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1}}\n\n",
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":\"mem://x\"}}\n\n",
		": a comment naming notifications/message\n\n",
		"event: debug\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"skipped by the SDK\"}}\n\n",
		"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"notifications/message\",\"params\":{\"data\":\"a request, refused\"}}\n\n",
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n",
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":\"not an object\"}\n\n",
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications\\/message\",\"params\":{\"data\":\"an escaped slash\"}}\n\n",
		"event:\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"an empty event type\"}}\n\n",
		"event:  message \ndata: {\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"notifications/message\",\"params\":{\"data\":\"a padded type, a null id\"}}\n\n",
		"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"\\\"method\\\":\\\"notifications/message\\\"\"}]}}\n\n",
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"the last, ended by the stream's end\"}}",
	}, "")
	for _, split := range []bool{false, true} {
		o := &logOrder{}
		var r io.Reader = strings.NewReader(stream)
		if split {
			r = oneByte{r}
		}
		b := &countingBody{ReadCloser: io.NopCloser(r), order: o}
		got, err := io.ReadAll(b)
		if err != nil || string(got) != stream {
			t.Fatalf("split %v: the stream came through changed (%d bytes of %d), %v", split, len(got), len(stream), err)
		}
		if o.read != 9 {
			t.Errorf("split %v: %d log messages and progress notifications counted, want 9", split, o.read)
		}
	}
}

// handledAfter has o handle a message after each of gaps, one after the other.
func handledAfter(o *logOrder, gaps ...time.Duration) {
	go func() {
		for _, d := range gaps {
			time.Sleep(d)
			o.noteHandled()
		}
	}()
}

// waitFor is how long o's wait, bounded by a second, took.
func waitFor(o *logOrder) time.Duration {
	start := time.Now()
	o.wait(context.Background(), time.Second)
	return time.Since(start)
}

// TestLogOrderWaits: a wait returns once every log message read is handled; one whose
// messages never come returns after its bound, and the next waits do not wait for them
// again; once they come after all, the next waits wait for their own again; and two
// calls that give up on the same messages together count them once.
func TestLogOrderWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ms = time.Millisecond
		o := &logOrder{}
		o.noteRead()
		o.noteRead()
		handledAfter(o, 10*ms, 10*ms)
		if d := waitFor(o); d != 20*ms {
			t.Errorf("waited %s for two messages handled after 10 and 20 ms", d)
		}
		o.noteRead() // never handled
		if d := waitFor(o); d != time.Second {
			t.Errorf("waited %s for a message never handled, want the bound", d)
		}
		if d := waitFor(o); d != 0 {
			t.Errorf("waited %s again for the message never handled", d)
		}
		o.noteHandled() // it came late
		o.noteRead()
		handledAfter(o, 10*ms)
		if d := waitFor(o); d != 10*ms {
			t.Errorf("waited %s for a message handled after 10 ms, once the late one came", d)
		}

		o.noteRead()
		o.noteRead() // both never handled
		done := make(chan struct{})
		for range 2 {
			go func() {
				waitFor(o)
				done <- struct{}{}
			}()
		}
		<-done
		<-done
		o.noteRead()
		o.noteRead() // the next call's own
		handledAfter(o, 10*ms, 10*ms)
		if d := waitFor(o); d != 20*ms {
			t.Errorf("waited %s for its two messages handled after 10 and 20 ms, after two calls gave up on the same two", d)
		}
	})
}
