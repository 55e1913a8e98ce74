package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/sluicelb/sluice/internal/config"
)

// TestAddAnsweredWithWhatItDid adds backends while each is removed again as soon as it exists:
// every add is answered 201 with the backend it added, not 404 because the removal came before
// the answer was built.
func TestAddAnsweredWithWhatItDid(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const n = 25
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		address := fmt.Sprintf("10.0.3.%d", i+1)
		wg.Go(func() {
			added, err := f.client.AddBackend(ctx, "web", config.Backend{Address: config.IPOf(address), Port: 8080}, false)
			switch {
			case err != nil:
				errs <- fmt.Errorf("add %s: %w", address, err)
			case added.Backend.Address != address || added.Backend.Port != 8080:
				errs <- fmt.Errorf("add %s answered backend %s:%d", address, added.Backend.Address, added.Backend.Port)
			}
		})
		wg.Go(func() {
			for {
				_, err := f.client.RemoveBackend(ctx, "web", address+":8080", false)
				var answer *Error
				if !errors.As(err, &answer) || answer.Status != http.StatusNotFound {
					if err != nil {
						errs <- fmt.Errorf("remove %s: %w", address, err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
