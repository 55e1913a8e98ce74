package ebpf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/plan"
)

// Options configure the eBPF datapath; zero values pick the defaults.
type Options struct {
	// Interfaces the program runs on. Empty: the plan's (config `interfaces`), or when those are
	// empty too, every non-loopback interface that is up.
	Interfaces []string
	// Attach is AttachTC (the default) or AttachXDP.
	Attach AttachMode
	// PinPath is the directory holding the pinned maps and links (default DefaultPinPath). It must
	// lie on a BPF filesystem mounted in the host's mount namespace: the datapath mounts none.
	// Balancers in several network namespaces of one host need one each.
	PinPath string
	// Sizes of the flow tables and the Maglev array; the maps are made with them once, and pinned
	// maps of other sizes are refused.
	Sizes MapSizes
}

// Datapath programs plans into the BPF maps of the program it runs on the interfaces. Maps and
// links are pinned, so that the program keeps forwarding, and its flows survive, when the
// process exits; the next Datapath over the same pin path adopts them.
type Datapath struct {
	log  *slog.Logger
	opts Options

	mu       sync.Mutex
	maps     *kernelMaps   // nil until needed
	prog     *ebpf.Program // loaded by the first Apply
	progTag  string
	progMaps []ebpf.MapID           // the pinned maps prog uses
	links    map[string]*attachment // by pin name
	// state is what the last Apply left in the maps; nil when that is not known (first use, a
	// failed Apply, Resync, Flush): the next Apply reads the maps back.
	state *state
	// watching tells that WatchFlows reads flow_events: Apply keeps config's flow_events set.
	watching bool
	// restored is what Restore found the maps hold, for the next Apply to start from; committed
	// what the last Apply left in them (nil after a failed one).
	restored  *restored
	committed *Committed
}

var _ datapath.Datapath = (*Datapath)(nil)

// New returns the eBPF datapath without touching the kernel: Apply loads, pins and attaches; Status reads what is pinned.
func New(log *slog.Logger, opts Options) (*Datapath, error) {
	if opts.Attach == "" {
		opts.Attach = AttachTC
	}
	if _, ok := attachPrograms[opts.Attach]; !ok {
		return nil, fmt.Errorf("attach mode %q: want %s or %s", opts.Attach, AttachTC, AttachXDP)
	}
	if opts.PinPath == "" {
		opts.PinPath = DefaultPinPath
	}
	if _, err := clockOffset(); err != nil {
		return nil, err
	}
	return &Datapath{log: log, opts: opts, links: map[string]*attachment{}}, nil
}

// Apply programs the plan into the maps in place (the program is not reloaded and no flow is
// dropped), writing only what differs from what it last programmed or, when that is not known,
// from what the maps hold; then it makes the program run on the target interfaces.
func (d *Datapath) Apply(ctx context.Context, p *plan.Plan) error {
	if err := d.CheckForwarding(p); err != nil {
		return err
	}
	_, err := d.apply(ctx, p)
	return err
}

var _ datapath.ForwardingChecker = (*Datapath)(nil)

// CheckForwarding refuses a plan with services of an IP family the namespace does not forward:
// the program routes every mode with bpf_fib_lookup, which fails where forwarding is off (the
// program then drops the packet and counts it, see Unforwarded).
func (d *Datapath) CheckForwarding(p *plan.Plan) error { return datapath.CheckForwarding(p) }

// apply is Apply, also returning how many map entries it wrote or deleted.
func (d *Datapath) apply(ctx context.Context, p *plan.Plan) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	from := d.restored
	d.restored, d.committed = nil, nil
	if from == nil {
		if err := d.load(); err != nil {
			return 0, err
		}
	}
	targets, err := d.targets(p)
	if err != nil {
		return 0, err
	}
	st, err := d.startState(from, p)
	if err != nil {
		return 0, fmt.Errorf("reading the maps back: %w", err)
	}
	token, err := writeToken(d.maps)
	if err != nil {
		return 0, err
	}
	s := &syncer{m: d.maps, st: st, events: d.watching}
	if err := s.plan(p); err != nil {
		return s.w.entries, fmt.Errorf("programming the maps: %w (after %d map writes; the next apply reads the maps back)", err, s.w.entries)
	}
	if from == nil {
		d.state = st // a restored state lacks the rings of the services it skipped
	}
	if s.prevSkipped > 0 {
		d.log.Warn("ebpf: maglev_prev is full: changed table slots without a second chance", "slots", s.prevSkipped)
	}
	if s.w.entries > 0 {
		d.log.Info("ebpf: applied", "map_writes", s.w.entries)
	} else {
		d.log.Debug("ebpf: maps already match the plan")
	}
	// A MAC goes in before the program runs on its interface, and out after it left.
	stale, err := putMACs(&s.w, d.maps, macsFor(d.opts.Attach, targets))
	if err != nil {
		return s.w.entries, fmt.Errorf("recording the interfaces' MACs: %w", err)
	}
	prog, err := d.attachTo(targets, from)
	if err != nil {
		return s.w.entries, err
	}
	if err := deleteAll(&s.w, d.maps.IfMacs, stale); err != nil {
		return s.w.entries, err
	}
	// What is committed only spares the next process a read-back: not knowing it fails nothing.
	if d.committed, err = d.committedNow(token, prog); err != nil {
		d.log.Debug("ebpf: what this apply committed is not known", "error", err)
	}
	return s.w.entries, nil
}

// startState is the state an Apply starts from: the one the last Apply left, else the one
// Restore found, else the maps read back.
func (d *Datapath) startState(from *restored, p *plan.Plan) (*state, error) {
	st := d.state
	d.state = nil
	switch {
	case st != nil:
		return st, nil
	case from != nil:
		return restoredState(d.maps, from.plan, p)
	default:
		return readState(d.maps)
	}
}

// attachTo makes the program run on the targets and returns it. After Restore, when the links
// already run the program Restore found, it loads none: loading one costs the verifier's time.
func (d *Datapath) attachTo(targets map[string]target, from *restored) (programID, error) {
	if from != nil && d.linksRun(targets, from.prog) {
		return from.prog, nil
	}
	if err := d.load(); err != nil {
		return programID{}, err
	}
	if err := d.attach(targets); err != nil {
		return programID{}, err
	}
	return programID{d.prog.Type(), d.progTag, d.progMaps}, nil
}

// Resync makes the next Apply read the maps and links back and repair what differs.
func (d *Datapath) Resync() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state, d.restored, d.committed = nil, nil, nil
	d.closeLinks()
}

// Flush detaches the program from every interface and removes everything under the pin path:
// maps, flows and links.
func (d *Datapath) Flush(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state, d.restored, d.committed = nil, nil, nil
	return errors.Join(d.detachExcept(nil), d.closeObjects(), os.RemoveAll(d.opts.PinPath))
}

// Close releases what this process holds; what is pinned keeps running.
func (d *Datapath) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state, d.restored, d.committed = nil, nil, nil
	d.closeLinks()
	return d.closeObjects()
}
