package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath/fake"
	"github.com/sluicelb/sluice/internal/health"
	"github.com/sluicelb/sluice/internal/plan"
	"github.com/sluicelb/sluice/internal/testutil"
)

// slowDatapath is the fake datapath whose applies, once held, block until released or until
// their context ends, like an nft apply of several transactions.
type slowDatapath struct {
	*fake.Datapath
	mu      sync.Mutex
	held    bool
	entered chan context.Context // the context of each held apply, when it starts
	release chan struct{}
}

func (d *slowDatapath) Apply(ctx context.Context, p *plan.Plan) error {
	d.mu.Lock()
	held := d.held
	d.mu.Unlock()
	if held {
		d.entered <- ctx
		select {
		case <-d.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return d.Datapath.Apply(ctx, p)
}

// hold makes the next applies block.
func (d *slowDatapath) hold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = true
}

// stopping is an engine over a slowDatapath whose Run the test stops.
type stopping struct {
	*Engine
	dp   *slowDatapath
	log  *testutil.LogBuffer
	stop context.CancelFunc
	done chan struct{} // closed when Run returned
}

func startStopping(t *testing.T, grace time.Duration) *stopping {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(twoServices))
	if err != nil {
		t.Fatal(err)
	}
	s := &stopping{dp: &slowDatapath{Datapath: fake.New(), entered: make(chan context.Context, 1), release: make(chan struct{})},
		log: &testutil.LogBuffer{}, done: make(chan struct{})}
	s.Engine = New(cfg, Options{Datapath: s.dp, Prober: &fakeProber{states: map[string]health.Status{}}, MinApplyInterval: time.Millisecond,
		ApplyGrace: grace, Log: slog.New(slog.NewTextHandler(s.log, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() {
		defer close(s.done)
		_ = s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	testutil.Eventually(t, "first apply", func() bool { return s.dp.Applies() == 1 })
	return s
}

// removeAPI removes the service api from the running config and returns the generation made.
func (s *stopping) removeAPI(t *testing.T) uint64 {
	t.Helper()
	result, err := s.Update(false, "test: remove api", func(cfg *config.Config) error {
		cfg.Services = cfg.Services[:1]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return result.Generation
}

// TestStopWaitsForTheApplyInFlight stops the engine while the datapath applies a change: the
// apply is not cut, Run returns only once it ended, and the change is reported applied.
func TestStopWaitsForTheApplyInFlight(t *testing.T) {
	s := startStopping(t, time.Hour)
	s.dp.hold()
	gen := s.removeAPI(t)
	applyCtx := <-s.dp.entered
	s.stop()
	testutil.Eventually(t, "the log tells the stop waits for the apply", func() bool {
		return strings.Contains(s.log.String(), "runs to its end first")
	})
	if err := applyCtx.Err(); err != nil {
		t.Fatalf("the apply in flight was cut when the stop began: %v", err)
	}
	select {
	case <-s.done:
		t.Fatal("Run returned with an apply in flight")
	default:
	}
	close(s.dp.release)
	<-s.done
	if err := s.Wait(context.Background(), gen); err != nil {
		t.Fatalf("the change applied in full, but Wait says %v", err)
	}
	if p := s.dp.Plan(); len(p.Services) != 1 {
		t.Fatalf("the datapath holds %d services, want 1", len(p.Services))
	}
}

// TestStopCutsAnApplyPastTheGrace checks that an apply that does not end within the grace is cut,
// said in the log, and that its change is answered ErrStopped rather than as retried.
func TestStopCutsAnApplyPastTheGrace(t *testing.T) {
	s := startStopping(t, time.Millisecond)
	s.dp.hold()
	gen := s.removeAPI(t)
	<-s.dp.entered
	s.stop()
	<-s.done
	if err := s.Wait(context.Background(), gen); !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait: %v, want ErrStopped", err)
	}
	if !strings.Contains(s.log.String(), "did not end in time and is cut") {
		t.Fatalf("the log does not tell the apply was cut:\n%s", s.log)
	}
}

// TestChangeAfterTheStopIsNotWaitedFor checks that a change the engine will not apply, as Run
// returned, is answered ErrStopped at once.
func TestChangeAfterTheStopIsNotWaitedFor(t *testing.T) {
	s := startStopping(t, time.Hour)
	s.stop()
	<-s.done
	gen := s.removeAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline)
	defer cancel()
	if err := s.Wait(ctx, gen); !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait: %v, want ErrStopped", err)
	}
}
