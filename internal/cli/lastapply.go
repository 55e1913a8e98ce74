package cli

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/config"
	"github.com/sluicelb/sluice/internal/datapath"
	"github.com/sluicelb/sluice/internal/datapath/nft"
	"github.com/sluicelb/sluice/internal/plan"
)

// lastApply is what the last `sluice apply -f` without a daemon committed on the nft datapath,
// kept beside the state file: the plan, and what the datapath needs to start from it. The next
// apply or plan compares with it and changes only the services that differ, instead of reading
// every table back, when the tables still hold it (nft.Datapath.Restore checks).
type lastApply struct {
	Plan *plan.Plan
	NFT  nft.Committed
	// Empty names the list fields of the plan (key -1) and of its services (by index) that are
	// empty but not nil: gob decodes both as nil, and plan.Equal tells them apart.
	Empty map[int][]string
	// Binary is the sluice binary that applied it (thisBinary): another one may render the same
	// plan into other rules, so it reads the tables back.
	Binary string
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

// lastApplyPath is the file of lastApply: beside the default state file of the namespace.
func lastApplyPath() string { return filepath.Join(filepath.Dir(statePath()), "last-apply.gob") }

// readLastApply reads the file of lastApply; nil when there is none or it does not decode.
func readLastApply(path string, log *slog.Logger) *lastApply {
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
	case rec.Binary == "" || rec.Binary != thisBinary():
		err = errors.New("written by another sluice binary")
	case rec.Plan == nil || !rec.restoreEmpty():
		err = errors.New("not a last apply")
	}
	if err != nil {
		log.Debug("the last apply is not used", "file", path, "error", err)
		return nil
	}
	return &rec
}

// restoreLastApply gives dp, when it is the nft datapath, what the last apply committed, if its
// tables still hold it, and returns that plan; nil otherwise (the kernel must be read).
func restoreLastApply(dp datapath.Datapath, path string, log *slog.Logger) (*plan.Plan, error) {
	n, ok := dp.(*nft.Datapath)
	if !ok {
		return nil, nil
	}
	rec := readLastApply(path, log)
	if rec == nil || rec.Plan.Datapath != config.DatapathNFT {
		return nil, nil
	}
	held, err := n.Restore(rec.NFT, rec.Plan)
	if err != nil || !held {
		return nil, err
	}
	return rec.Plan, nil
}

// saveLastApply keeps p as what dp committed, when dp is the nft datapath and knows exactly what
// it committed; otherwise it removes what an earlier apply kept.
func saveLastApply(dp datapath.Datapath, p *plan.Plan, path string) error {
	n, ok := dp.(*nft.Datapath)
	var committed nft.Committed
	if ok {
		committed, ok = n.Committed()
	}
	if !ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeLastApply(path, lastApply{Plan: p, NFT: committed})
}

// writeLastApply writes rec to path, whole or not at all.
func writeLastApply(path string, rec lastApply) error {
	rec.markEmpty()
	rec.Binary = thisBinary()
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
	prev, err := restoreLastApply(dp, lastApplyPath(), log)
	if err != nil {
		return plan.Change{}, err
	}
	if prev != nil {
		return plan.Diff(prev, p), nil
	}
	return kernelChange(ctx, cfg, p, log)
}

// oneShotPlan is what `sluice plan` without a daemon shows: the change oneShotChange finds (for
// the nft datapath, made but not applied; the others are only read).
func (g *globals) oneShotPlan(ctx context.Context, cfg *config.Config) (plan.Change, error) {
	p, err := plan.Build(cfg, nil)
	if err != nil {
		return plan.Change{}, err
	}
	if cfg.Datapath != config.DatapathNFT {
		return kernelChange(ctx, cfg, p, g.logger())
	}
	dp, err := nft.New(g.logger())
	if err != nil {
		return plan.Change{}, err
	}
	return oneShotChange(ctx, cfg, p, dp, g.logger())
}
