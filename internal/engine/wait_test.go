package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// TestWaitReturnsOnceTheDatapathHoldsTheChange: after Wait, the datapath holds the change; a
// failed apply is Wait's error, and the change stays the running config.
func TestWaitReturnsOnceTheDatapathHoldsTheChange(t *testing.T) {
	h := start(t, twoServices, Options{})
	weigh := func(w int) Result {
		t.Helper()
		res, err := h.Update(false, "test", func(cfg *config.Config) error {
			cfg.Services[0].Backends[0].Weight = &w
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := weigh(3)
	if res.Generation != h.Generation() {
		t.Fatalf("the change made generation %d, the running config is %d", res.Generation, h.Generation())
	}
	if err := h.Wait(context.Background(), res.Generation); err != nil {
		t.Fatal(err)
	}
	if got := h.dp.Plan().Services[1].Backends[0].Weight; got != 3 {
		t.Fatalf("after Wait the datapath holds weight %d, want 3", got)
	}

	broken := errors.New("no room")
	h.dp.FailWith(broken)
	res = weigh(4)
	if err := h.Wait(context.Background(), res.Generation); !errors.Is(err, broken) {
		t.Fatalf("Wait of a change the datapath refused: %v", err)
	}
	if w := h.Config().Services[0].Backends[0].Weight; *w != 4 {
		t.Fatalf("a failed apply undid the running config: weight %d", *w)
	}

	dry, err := h.Update(true, "test", func(cfg *config.Config) error { cfg.Services = cfg.Services[:1]; return nil })
	if err != nil || dry.Generation != res.Generation {
		t.Fatalf("a dry run made generation %d (running %d): %v", dry.Generation, res.Generation, err)
	}
	h.dp.FailWith(nil)
	if err := h.Wait(context.Background(), weigh(5).Generation); err != nil {
		t.Fatalf("Wait once the datapath applies again: %v", err)
	}
}

// TestWaitEndsWithItsContext: a generation never applied waits until ctx ends.
func TestWaitEndsWithItsContext(t *testing.T) {
	h := start(t, twoServices, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Wait(ctx, h.Generation()+1); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}
