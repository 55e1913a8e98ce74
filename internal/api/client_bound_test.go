package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientBoundsTheAnswer: a server that answers without end (a wrong --api, or a hostile one)
// makes the client stop at MaxAnswerBytes with an error naming the limit, not read on.
func TestClientBoundsTheAnswer(t *testing.T) {
	chunk := []byte(strings.Repeat(" ", 1<<20))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range MaxAnswerBytes/len(chunk) + 2 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	_, err := NewTCPClient(srv.URL, "0123456789abcdef").Sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "larger than 256 MiB") {
		t.Fatalf("Sync from an endless server: %v, want the 256 MiB limit", err)
	}
}
