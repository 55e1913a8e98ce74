package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// RequireToken lets through only the requests carrying "Authorization: Bearer <token>" and
// answers the others with 401; an empty token lets nothing through. The TCP listener needs it.
func RequireToken(token string, h http.Handler) http.Handler {
	// Comparing digests keeps the comparison constant-time in the token's length too.
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, found := strings.Cut(r.Header.Get("Authorization"), " ")
		if !found || !strings.EqualFold(scheme, "Bearer") {
			unauthorized(w, `Bearer realm="sluice"`, "missing bearer token: send Authorization: Bearer <token>")
			return
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if token == "" || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			unauthorized(w, `Bearer realm="sluice", error="invalid_token"`, "invalid bearer token")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// unauthorized answers 401 with the challenge and a JSON error.
func unauthorized(w http.ResponseWriter, challenge, message string) {
	w.Header().Set("WWW-Authenticate", challenge)
	writeError(w, &Error{Status: http.StatusUnauthorized, Message: message})
}
