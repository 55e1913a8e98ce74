package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/plan"
)

// quorumCommandTimeout bounds a quorum_up or quorum_down command; its process group is then
// killed.
const quorumCommandTimeout = 10 * time.Second

// Quorum states of a ServiceView.
const (
	QuorumHeld = "held"
	QuorumLost = "lost"
)

// quorums is what the engine knows of its services' quorums, under a lock of its own: the
// planner reads it (with Engine.mu held), the reconcile loop records what each apply decided.
type quorums struct {
	mu   sync.Mutex
	lost map[string]bool            // by service, as last programmed; absent: never decided
	runs map[string]<-chan struct{} // by service, closed when its last command ends: they run in order
}

// quorumChange is a quorum that a plan the datapath holds changed: the event to publish and the
// command to run (none when argv is empty).
type quorumChange struct {
	seen  quorumSeen
	event Event
	field string
	argv  []string
}

// quorumSeen is the quorum of one service as a plan decided it.
type quorumSeen struct {
	service                    string
	lost                       bool
	weight, quorum, lose, gain int
	up, down                   []string
}

// holds is the engine's plan.QuorumRule: a service keeps the state it was last programmed in
// until its available weight crosses the hysteresis (held while weight >= quorum-hysteresis,
// lost while weight < quorum+hysteresis); one never programmed holds it at its quorum or more.
// It reads the state without changing it, so dry runs and diffs may build plans.
func (qs *quorums) holds(s *config.Service, weight int) bool {
	qs.mu.Lock()
	lost, decided := qs.lost[s.Name]
	qs.mu.Unlock()
	lose, gain := s.QuorumThresholds()
	switch {
	case !decided:
		return plan.AtLeastQuorum(s, weight)
	case lost:
		return weight >= gain
	default:
		return weight >= lose
	}
}

// availableWeight is the total weight of the backends of s that may take new flows, as the plan
// counts it against the quorum.
func availableWeight(s *config.Service, available plan.Availability) int {
	total := 0
	for _, cb := range s.Backends {
		b, err := plan.BackendOf(cb, s.Mode)
		if err == nil && (available == nil || available(s.Name, b)) {
			total += b.Weight
		}
	}
	return total
}

// quorumsOf lists the quorum of every service of cfg that has one, as p (built from cfg with
// available) decided it.
func quorumsOf(cfg *config.Config, p *plan.Plan, available plan.Availability) []quorumSeen {
	lost := map[string]bool{}
	for i := range p.Services {
		lost[p.Services[i].Name] = p.Services[i].QuorumLost
	}
	var out []quorumSeen
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if s.Quorum <= 0 {
			continue
		}
		lose, gain := s.QuorumThresholds()
		out = append(out, quorumSeen{
			service: s.Name, lost: lost[s.Name], weight: availableWeight(s, available),
			quorum: s.Quorum, lose: lose, gain: gain, up: s.QuorumUp, down: s.QuorumDown,
		})
	}
	return out
}

// noteQuorums records the quorums of a plan the datapath holds, forgetting the services that
// have none anymore. Each change is published and runs the service's command; so does a service
// programmed for the first time without its quorum (quorum_down, as keepalived at startup).
func (e *Engine) noteQuorums(ctx context.Context, seen []quorumSeen) {
	for _, c := range e.quorum.note(seen) {
		e.publish(c.event)
		if len(c.argv) > 0 {
			e.startQuorumCommand(ctx, c.seen, c.field, c.argv)
		}
	}
}

// note records the quorums seen and forgets the services that have none anymore; it returns the
// changes, in the order seen.
func (qs *quorums) note(seen []quorumSeen) []quorumChange {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	was := qs.lost
	qs.lost = make(map[string]bool, len(seen))
	var out []quorumChange
	for _, q := range seen {
		qs.lost[q.service] = q.lost
		lost, decided := was[q.service]
		if decided && lost == q.lost || !decided && !q.lost {
			continue
		}
		kind, field, argv := EventQuorumRegained, "quorum_up", q.up
		msg := fmt.Sprintf("available weight %d reached %d: the backends take new flows until it falls below %d", q.weight, q.gain, q.lose)
		if q.lost {
			below := q.lose
			if !decided {
				below = q.quorum // a first plan holds the quorum at its value
			}
			kind, field, argv = EventQuorumLost, "quorum_down", q.down
			msg = fmt.Sprintf("available weight %d is below %d: the backends take no new flows until it is %d", q.weight, below, q.gain)
		}
		msg += fmt.Sprintf(" (quorum %d, hysteresis %d)", q.quorum, q.gain-q.quorum)
		out = append(out, quorumChange{seen: q, event: Event{Type: kind, Service: q.service, Message: msg}, field: field, argv: argv})
	}
	for name := range qs.runs {
		if _, ok := qs.lost[name]; !ok {
			delete(qs.runs, name)
		}
	}
	return out
}

// queue makes done the service's last command and returns the one before it (nil when none):
// a command waits for the previous one to end.
func (qs *quorums) queue(service string, done <-chan struct{}) (prev <-chan struct{}) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.runs == nil {
		qs.runs = map[string]<-chan struct{}{}
	}
	prev = qs.runs[service]
	qs.runs[service] = done
	return prev
}

// startQuorumCommand runs argv, the command field of q, once the service's previous command
// ended, without blocking: its exit status and first output line are logged, and a failure is
// published.
func (e *Engine) startQuorumCommand(ctx context.Context, q quorumSeen, field string, argv []string) {
	done := make(chan struct{})
	prev := e.quorum.queue(q.service, done)
	go func() {
		defer close(done)
		if prev != nil {
			select {
			case <-prev:
			case <-ctx.Done():
				return
			}
		}
		ctx, cancel := context.WithTimeout(ctx, quorumCommandTimeout)
		defer cancel()
		out, err := health.RunCommand(ctx, argv, "SLUICE_SERVICE="+q.service, "SLUICE_QUORUM_WEIGHT="+strconv.Itoa(q.weight))
		out, _, _ = strings.Cut(out, "\n")
		status := "exit status 0"
		switch {
		case err != nil && ctx.Err() == context.DeadlineExceeded:
			status = "killed after " + quorumCommandTimeout.String()
		case err != nil:
			status = err.Error()
		}
		e.log.Info("quorum command ran", "service", q.service, "command", field, "argv", argv, "status", status, "output", out)
		if err != nil {
			msg := field + " " + argv[0] + ": " + status
			if out != "" {
				msg += ": " + out
			}
			e.publish(Event{Type: EventQuorumCommandFailed, Service: q.service, Message: msg})
		}
	}()
}

// state is the state a ServiceView shows of s: as programmed, or before the first plan that
// held s, as that plan would decide it.
func (qs *quorums) state(s *config.Service, weight int) string {
	if s.Quorum <= 0 {
		return ""
	}
	qs.mu.Lock()
	lost, decided := qs.lost[s.Name]
	qs.mu.Unlock()
	if !decided {
		lost = !plan.AtLeastQuorum(s, weight)
	}
	if lost {
		return QuorumLost
	}
	return QuorumHeld
}
