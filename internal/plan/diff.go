package plan

// Change is the difference between two plans as an operator wants to see it.
type Change struct {
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Changed []string `json:"changed"`
	// Moved is, per changed service, the share of slots (and so of new flows' hash space) whose
	// backend differs.
	Moved map[string]float64 `json:"moved"`
}

// Empty tells whether nothing differs.
func (c Change) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Changed) == 0 }

// Diff compares two plans; old may be nil.
func Diff(old, new *Plan) Change {
	c := Change{Moved: map[string]float64{}}
	before := map[string]*Service{}
	if old != nil {
		for i := range old.Services {
			before[old.Services[i].Name] = &old.Services[i]
		}
	}
	for i := range new.Services {
		n := &new.Services[i]
		o, ok := before[n.Name]
		delete(before, n.Name)
		switch {
		case !ok:
			c.Added = append(c.Added, n.Name)
		case !o.Equal(n):
			c.Changed = append(c.Changed, n.Name)
			c.Moved[n.Name] = moved(o, n)
		}
	}
	if old != nil {
		for _, o := range old.Services {
			if _, gone := before[o.Name]; gone {
				c.Removed = append(c.Removed, o.Name)
			}
		}
	}
	return c
}

// moved is the share of new flows that the new table sends to another backend than the old one
// did: slot by slot for tables of one size; for tables of different sizes, over hashes spread
// evenly over the 32-bit space (a flow's slot is its hash modulo the table's size).
func moved(o, n *Service) float64 {
	if len(n.Slots) == 0 || len(o.Slots) == 0 {
		return 1
	}
	differs := func(i, j int) bool { return o.Backends[o.Slots[i]].ID() != n.Backends[n.Slots[j]].ID() }
	diff, total := 0, len(n.Slots)
	if len(o.Slots) == len(n.Slots) {
		for i := range n.Slots {
			if differs(i, i) {
				diff++
			}
		}
	} else {
		const samples = 1 << 16
		for i := range uint64(samples) {
			h := i<<16 | 1<<15
			if differs(int(h%uint64(len(o.Slots))), int(h%uint64(len(n.Slots)))) {
				diff++
			}
		}
		total = samples
	}
	return float64(diff) / float64(total)
}
