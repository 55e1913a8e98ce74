package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"
)

// RequireToken lets through only the requests carrying "Authorization: Bearer <token>" and
// answers the others with 401 as soon as their headers are in, without reading their body, and
// closes their connection; an empty token lets nothing through. The TCP listener needs it.
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

// unauthorized answers 401 with the challenge and a JSON error, and closes the connection
// without reading the request's body: net/http would otherwise read up to 256 KiB of it before
// answering (to keep the connection alive) and again after, so a client that stalls its body
// would hold the answer and the connection.
func unauthorized(w http.ResponseWriter, challenge, message string) {
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Connection", "close") // answer at once, without reading the body first
	writeError(w, &Error{Status: http.StatusUnauthorized, Message: message})
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now()) // and read none of it after: the connection closes
}
