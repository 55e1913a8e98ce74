package api

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRequireToken(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(RequireToken("s3cret", f.handler))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	for name, token := range map[string]string{"missing": "", "wrong": "guess", "prefix": "s3cre", "longer": "s3cret2"} {
		c := NewTCPClient(srv.URL, token)
		c.http = &http.Client{Transport: contractChecker(t, http.DefaultTransport)}
		var apiErr *Error
		if _, err := c.Status(ctx); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
			t.Errorf("%s token: %v, want 401", name, err)
		}
	}
	resp, err := http.Get(srv.URL + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if challenge := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(challenge, "Bearer") {
		t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", challenge)
	}

	c := NewTCPClient(srv.URL+"/", "s3cret")
	c.http = &http.Client{Transport: contractChecker(t, http.DefaultTransport)}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("right token: %v", err)
	}
}

func TestRequireEmptyTokenLetsNothingThrough(t *testing.T) {
	h := RequireToken("", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/v1/status", nil)
	req.Header.Set("Authorization", "Bearer ")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("empty token: %d, want 401", rec.Code)
	}
}

// TestUnauthorizedDoesNotReadTheBody sends the headers of a large body, then stalls: the 401 must
// come anyway, and the server must close the connection rather than wait for the body.
func TestUnauthorizedDoesNotReadTheBody(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(RequireToken("s3cret-s3cret-s3cret", f.handler))
	t.Cleanup(srv.Close)
	for name, header := range map[string]string{
		"content-length": "Content-Length: 100000\r\n", // under net/http's 256 KiB it reads to keep the connection
		"chunked":        "Transfer-Encoding: chunked\r\n",
		"expect":         "Content-Length: 100000\r\nExpect: 100-continue\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A bound so that a broken server fails the test instead of hanging it; not a timing.
			if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			request := "PUT /v1/config HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n" +
				"Authorization: Bearer guess\r\n" + header + "\r\n"
			if !strings.Contains(header, "Expect") {
				request += "{" // the first byte of the body, and no more
			}
			if _, err := io.WriteString(conn, request); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(conn)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("no answer while the body stalls: %v", err)
			}
			if _, err := io.ReadAll(resp.Body); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
				t.Fatalf("status %d, Connection: close %v; want 401 and a closed connection", resp.StatusCode, resp.Close)
			}
			if n, err := r.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("after the 401 the connection gave %d bytes, %v; want it closed (EOF)", n, err)
			}
		})
	}
}
