package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/datapath/ebpf"
	"github.com/sluicelb/sluice/internal/datapath/nft"
	"github.com/sluicelb/sluice/internal/datapath/split"
	"github.com/sluicelb/sluice/internal/maglev"
	"github.com/sluicelb/sluice/internal/plan"
)

// lastApply is what the last `sluice apply -f` without a daemon committed, kept beside the state
// file: the plan, and what the datapath needs to start from it. The next apply or plan compares
// with it and changes only the services that differ, instead of reading every table or map back,
// when the kernel still holds it (nft.Datapath.Restore and ebpf.Datapath.Restore check).
type lastApply struct {
	Plan *plan.Plan
	NFT  nft.Committed
	EBPF ebpf.Committed
	// Slots are the plan's slot tables, by service (packSlots): the plan is kept without them, as
	// gob writes an int slice an element at a time and ebpf tables are large.
	Slots []packedSlots
	// Tables are the Maglev tables the apply built or took, packed by maglev.Key: the next
	// process builds none of them again (maglev.Remember).
	Tables map[string][]byte
	// Empty names the list fields of the plan (key -1) and of its services (by index) that are
	// empty but not nil: gob decodes both as nil, and plan.Equal tells them apart.
	Empty map[int][]string
	// Binary is the sluice binary that applied it (thisBinary): another one may render the same
	// plan into other rules, so it reads the tables back, unless sameRenderer says otherwise.
	Binary string
	// Format is lastApplyFormat of the binary that wrote it (0: written before formats), and
	// NFTRender its nft.RenderVersion.
	Format    int
	NFTRender int
}

// lastApplyFormat is the layout of lastApply's file: another binary's file is trusted only with
// the same (sameRenderer).
const lastApplyFormat = 1

// sameRenderer tells whether this binary leaves the kernel as rec's writer did for the same plan:
// it is the same binary, or one that reads the same format and renders nft tables the same way
// (nft.RenderVersion: an upgrade that did not change the rules). The ebpf datapath's maps are
// trusted from the same binary only.
func (rec *lastApply) sameRenderer() bool {
	if rec.Binary != "" && rec.Binary == thisBinary() {
		return true
	}
	return rec.Format == lastApplyFormat && rec.Plan != nil && rec.Plan.Datapath == config.DatapathNFT &&
		rec.NFTRender == nft.RenderVersion
}

// thisBinary identifies the running sluice binary: its path, size and modification time, which
// a rebuild or an upgrade changes.
func thisBinary() string {
	path, err := os.Executable()
	if err != nil {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s %d %d", path, fi.Size(), fi.ModTime().UnixNano())
}

// emptyLists names the fields of the struct v that are empty lists, not nil.
func emptyLists(v reflect.Value) []string {
	var out []string
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice && !f.IsNil() && f.Len() == 0 {
			out = append(out, v.Type().Field(i).Name)
		}
	}
	return out
}

// markEmpty fills rec.Empty from its plan.
func (rec *lastApply) markEmpty() {
	rec.Empty = map[int][]string{}
	if names := emptyLists(reflect.ValueOf(rec.Plan).Elem()); len(names) > 0 {
		rec.Empty[-1] = names
	}
	for i := range rec.Plan.Services {
		if names := emptyLists(reflect.ValueOf(&rec.Plan.Services[i]).Elem()); len(names) > 0 {
			rec.Empty[i] = names
		}
	}
}

// restoreEmpty makes the lists that rec.Empty names empty again; false when it names a field or
// service the plan does not have.
func (rec *lastApply) restoreEmpty() bool {
	for i, names := range rec.Empty {
		if i < -1 || i >= len(rec.Plan.Services) {
			return false
		}
		v := reflect.ValueOf(rec.Plan).Elem()
		if i >= 0 {
			v = reflect.ValueOf(&rec.Plan.Services[i]).Elem()
		}
		for _, name := range names {
			f := v.FieldByName(name)
			if f.Kind() != reflect.Slice {
				return false
			}
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		}
	}
	return true
}

// packedSlots is the slot table of a service: Table, the one of Tables by that key, or else
// Packed (maglev.Pack).
type packedSlots struct {
	Table  string
	Packed []byte
}

// packSlots moves the plan's slot tables into rec.Slots, leaving rec.Plan a copy without them
// (the plan applied keeps its own).
func (rec *lastApply) packSlots() {
	p := *rec.Plan
	p.Services = slices.Clone(p.Services)
	rec.Slots = make([]packedSlots, len(p.Services))
	for i := range p.Services {
		s := &p.Services[i]
		if s.Slots == nil {
			continue
		}
		packed := maglev.Pack(s.Slots)
		if key := tableKey(s); bytes.Equal(rec.Tables[key], packed) {
			rec.Slots[i].Table = key
		} else {
			rec.Slots[i].Packed = packed
		}
		s.Slots = nil
	}
	rec.Plan = &p
}

// tableKey is the maglev.Key of the table a service's slots are when its scheduler built them
// from its backends' weights, as it does unless health took weight away.
func tableKey(s *plan.Service) string {
	backends := make([]maglev.Backend, len(s.Backends))
	for i, b := range s.Backends {
		backends[i] = maglev.Backend{ID: b.ID(), Weight: uint32(b.Weight)}
	}
	return maglev.Key(backends, len(s.Slots))
}

// unpackSlots puts rec.Slots back into the plan's services; false when they do not fit it (a
// table for another number of services, a slot not an index of its service's backends). A table
// the service of the same name in next (when not nil) has too is taken from it: shared, the
// tables compare at once (plan.Service.Equal).
func (rec *lastApply) unpackSlots(next *plan.Plan) bool {
	if len(rec.Slots) != len(rec.Plan.Services) {
		return false
	}
	same := tablesOf(next)
	// matched is the table of next found to be the one of Tables by a key: services of the same
	// backends share one (maglev.Build), compared once.
	matched := map[string][]int{}
	for i, ps := range rec.Slots {
		s := &rec.Plan.Services[i]
		packed := ps.Packed
		if ps.Table != "" {
			if packed = rec.Tables[ps.Table]; packed == nil {
				return false
			}
		}
		if packed == nil {
			continue
		}
		if slots := same(s.Name); slots != nil && (ps.Table != "" && sameTable(matched[ps.Table], slots) || samePacked(packed, slots)) {
			if ps.Table != "" {
				matched[ps.Table] = slots
			}
			s.Slots = slots
			continue
		}
		var ok bool
		if s.Slots, ok = maglev.Unpack(packed, len(s.Backends)); !ok || slices.Contains(s.Slots, -1) {
			return false
		}
	}
	rec.Slots = nil
	return true
}

// tablesOf returns the table of next's service of a name; nil when next is nil or has none.
func tablesOf(next *plan.Plan) func(name string) []int {
	if next == nil {
		return func(string) []int { return nil }
	}
	byName := make(map[string][]int, len(next.Services))
	for _, s := range next.Services {
		byName[s.Name] = s.Slots
	}
	return func(name string) []int { return byName[name] }
}

// sameTable tells whether a and b are one table, not only equal ones.
func sameTable(a, b []int) bool { return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0] }

// samePacked tells whether a packed table (maglev.Pack) is slots.
func samePacked(packed []byte, slots []int) bool {
	i := 0
	for ; len(packed) > 0 && i < len(slots); i++ {
		if b := packed[0]; b < 0x80 { // a uvarint of one byte
			if int(b) != slots[i]+1 {
				return false
			}
			packed = packed[1:]
			continue
		}
		b, n := binary.Uvarint(packed)
		if n <= 0 || b != uint64(slots[i]+1) {
			return false
		}
		packed = packed[n:]
	}
	return len(packed) == 0 && i == len(slots)
}

// lastApplyPath is the file of lastApply: beside the default state file of the namespace.
func lastApplyPath() string { return filepath.Join(filepath.Dir(statePath()), "last-apply.gob") }

// readLastApply reads the file of lastApply, sharing the tables it has in common with next (see
// unpackSlots); nil when there is none or it does not decode.
func readLastApply(path string, next *plan.Plan, log *slog.Logger) *lastApply {
	return decodeLastApply(path, log).forPlan(next, path, log)
}

// decodeLastApply reads the file of lastApply, its slots still packed; nil when there is none, it
// does not decode or another binary that may render other rules wrote it.
func decodeLastApply(path string, log *slog.Logger) *lastApply {
	data, err := boundedread.File(path, boundedread.ConfigBytes)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Debug("the last apply is not used", "file", path, "error", err)
		}
		return nil
	}
	var rec lastApply
	err = gob.NewDecoder(bytes.NewReader(data)).Decode(&rec)
	switch {
	case err != nil:
	case !rec.sameRenderer():
		err = errors.New("written by another sluice binary, which may render other rules")
	case rec.Plan == nil:
		err = errors.New("not a last apply")
	}
	if err != nil {
		log.Debug("the last apply is not used", "file", path, "error", err)
		return nil
	}
	return &rec
}

// forPlan unpacks a decoded last apply (unpackSlots) and restores its empty lists; nil when they
// do not fit its plan, or rec is nil.
func (rec *lastApply) forPlan(next *plan.Plan, path string, log *slog.Logger) *lastApply {
	if rec == nil {
		return nil
	}
	if !rec.unpackSlots(next) || !rec.restoreEmpty() {
		log.Debug("the last apply is not used", "file", path, "error", "not a last apply")
		return nil
	}
	return rec
}

// lastRead is the last apply rememberTables read, for restoreLastApply to take: the file is read
// once a process.
var lastRead struct {
	sync.Mutex
	path string
	rec  *lastApply
}

// rememberTables hands maglev.Build the Maglev tables the last apply kept, so that building the
// plan of a file that changed one service builds one table, not every service's.
func rememberTables(log *slog.Logger) {
	path := lastApplyPath()
	rec := decodeLastApply(path, log)
	lastRead.Lock()
	lastRead.path, lastRead.rec = path, rec
	lastRead.Unlock()
	var tables map[string][]byte
	if rec != nil {
		tables = rec.Tables
	}
	maglev.Remember(tables)
}

// takeLastApply is the last apply of path: the one rememberTables read, else the file read now.
func takeLastApply(path string, next *plan.Plan, log *slog.Logger) *lastApply {
	lastRead.Lock()
	rec := lastRead.rec
	if lastRead.path != path {
		rec = nil
	}
	lastRead.path, lastRead.rec = "", nil
	lastRead.Unlock()
	if rec == nil {
		return readLastApply(path, next, log)
	}
	return rec.forPlan(next, path, log)
}

// restoreLastApply gives dp what the last apply committed, if its tables or maps still hold it,
// and returns that plan; nil otherwise (the kernel must be read).
func restoreLastApply(dp datapath.Datapath, path string, next *plan.Plan, log *slog.Logger) (*plan.Plan, error) {
	n, e := lastApplied(dp)
	if n == nil && e == nil {
		return nil, nil
	}
	rec := takeLastApply(path, next, log)
	var held bool
	var err error
	switch {
	case rec == nil:
	case n != nil && rec.Plan.Datapath == config.DatapathNFT:
		held, err = n.Restore(rec.NFT, rec.Plan)
	case e != nil && rec.Plan.Datapath == config.DatapathEBPF && !synProtected(rec.Plan):
		held, err = e.Restore(rec.EBPF, rec.Plan)
	}
	if err != nil || !held {
		return nil, err
	}
	return rec.Plan, nil
}

// lastApplied is dp as the nft or the ebpf datapath, whichever it is, whose applies are kept: the
// ebpf one inside the split datapath of a config on ebpf (its services with syn_protection go to
// nft, which lastApply does not keep: a plan with such services is read back).
func lastApplied(dp datapath.Datapath) (*nft.Datapath, *ebpf.Datapath) {
	switch d := dp.(type) {
	case *nft.Datapath:
		return d, nil
	case *split.Datapath:
		e, _ := d.First().(*ebpf.Datapath)
		return nil, e
	}
	return nil, nil
}

// synProtected tells whether a plan has a service with syn_protection.
func synProtected(p *plan.Plan) bool {
	return slices.ContainsFunc(p.Services, func(s plan.Service) bool { return s.SYNProtection })
}

// saveLastApply keeps p as what dp committed, when dp knows exactly what it committed; otherwise
// it removes what an earlier apply kept.
func saveLastApply(dp datapath.Datapath, p *plan.Plan, path string) error {
	rec, ok := lastApply{Plan: p}, false
	switch n, e := lastApplied(dp); {
	case n != nil:
		rec.NFT, ok = n.Committed()
	case e != nil && !synProtected(p):
		rec.EBPF, ok = e.Committed()
	}
	if !ok {
		return forgetLastApply(path)
	}
	return writeLastApply(path, rec)
}

// forgetLastApply removes the file of lastApply, if any: after a flush it describes nothing.
func forgetLastApply(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// writeLastApply writes rec to path, whole or not at all.
func writeLastApply(path string, rec lastApply) error {
	rec.markEmpty()
	rec.Tables = maglev.Remembered()
	rec.packSlots()
	rec.Binary, rec.Format, rec.NFTRender = thisBinary(), lastApplyFormat, nft.RenderVersion
	var data bytes.Buffer
	if err := gob.NewEncoder(&data).Encode(rec); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".last-apply-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	if _, err := tmp.Write(data.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// oneShotChange is the change from what the kernel holds to cfg's plan p, for an apply or a plan
// without a daemon: against the last apply's plan when dp's tables still hold it (dp then starts
// from it), otherwise against the services read back from every datapath (kernelChange).
func oneShotChange(ctx context.Context, cfg *config.Config, p *plan.Plan, dp datapath.Datapath, log *slog.Logger) (plan.Change, error) {
	prev, err := restoreLastApply(dp, lastApplyPath(), p, log)
	if err != nil {
		return plan.Change{}, err
	}
	if prev != nil {
		return plan.Diff(prev, p), nil
	}
	return kernelChange(ctx, cfg, p, log)
}

// oneShotPlan is what `sluice plan` without a daemon shows: the change oneShotChange finds, with
// the datapath made but not applied.
func (g *globals) oneShotPlan(ctx context.Context, cfg *config.Config) (plan.Change, error) {
	rememberTables(g.logger())
	p, err := plan.Build(cfg, nil)
	if err != nil {
		return plan.Change{}, err
	}
	dp, err := datapathFor(cfg, g.logger())
	if err != nil {
		return plan.Change{}, err
	}
	return oneShotChange(ctx, cfg, p, dp, g.logger())
}
