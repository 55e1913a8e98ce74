package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
