package engine

import (
	"context"
	"errors"

	"github.com/sluicelb/sluice/internal/datapath"
)

// Flows lists the flows the datapath tracks for a configured service (sluice flows); a service
// not programmed yet has none.
func (e *Engine) Flows(ctx context.Context, name string, filter datapath.FlowFilter) (datapath.FlowList, error) {
	if _, _, err := FindService(e.running(), name); err != nil {
		return datapath.FlowList{}, err
	}
	lister, ok := e.dp.(datapath.FlowLister)
	if !ok {
		return datapath.FlowList{}, errors.New("this datapath cannot list flows")
	}
	list, err := lister.Flows(ctx, name, filter)
	if errors.Is(err, datapath.ErrNoService) {
		return datapath.FlowList{Flows: []datapath.Flow{}}, nil
	}
	return list, err
}
