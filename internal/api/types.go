package api

import (
	"time"

	"github.com/sluicelb/sluice/internal/engine"
	"github.com/sluicelb/sluice/internal/plan"
)

// Status answers GET /v1/status.
type Status struct {
	Version       string            `json:"version"`
	Datapath      string            `json:"datapath"`
	ConfigFile    string            `json:"config_file"`
	ConfigSource  string            `json:"config_source,omitempty"`
	Started       time.Time         `json:"started"`
	UptimeSeconds float64           `json:"uptime_seconds"`
	Apply         engine.ApplyStats `json:"apply"`
}

// ServiceResult answers a service added or replaced: the service as it is now and what changed.
type ServiceResult struct {
	Service engine.ServiceView `json:"service"`
	Change  plan.Change        `json:"change"`
}

// BackendResult answers a backend added or reweighted: the backend as it is now and what changed.
type BackendResult struct {
	Backend engine.BackendView `json:"backend"`
	Change  plan.Change        `json:"change"`
}

// ChangeResult answers a removal, a reload, a replaced config and every dry run.
type ChangeResult struct {
	Change plan.Change `json:"change"`
}

// weightBody is the body of PATCH /v1/services/{name}/backends/{backend}.
type weightBody struct {
	Weight *int `json:"weight"`
}

// drainBody is the optional body of POST /v1/services/{name}/backends/{backend}/drain.
type drainBody struct {
	Timeout string `json:"timeout,omitempty"`
}
