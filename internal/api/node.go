package api

import (
	"net/http"
)

// bgp answers the node's BGP sessions and the announcement of each VIP.
func (s *server) bgp(w http.ResponseWriter, r *http.Request) error {
	view, err := s.engine.BGP(r.Context())
	if err != nil {
		return err
	}
	return respond(w, http.StatusOK, view)
}

// sync answers the state of the replication of flows to the other nodes.
func (s *server) sync(w http.ResponseWriter, _ *http.Request) error {
	return respond(w, http.StatusOK, s.engine.Sync())
}

// node answers the node's drain state.
func (s *server) node(w http.ResponseWriter, _ *http.Request) error {
	return respond(w, http.StatusOK, s.engine.Node())
}

// drainNode withdraws every VIP and follows the node's flows (engine.DrainNode); 202 with the
// node's state.
func (s *server) drainNode(w http.ResponseWriter, r *http.Request) error {
	if _, err := readChangeParams(r); err != nil {
		return err
	}
	timeout, err := drainTimeout(r)
	if err != nil {
		return err
	}
	view, err := s.engine.DrainNode(r.Context(), timeout)
	if err != nil {
		return err
	}
	return respond(w, http.StatusAccepted, view)
}

// undrainNode makes the node announce its VIPs again.
func (s *server) undrainNode(w http.ResponseWriter, r *http.Request) error {
	if _, err := readChangeParams(r); err != nil {
		return err
	}
	return respond(w, http.StatusOK, s.engine.UndrainNode())
}
