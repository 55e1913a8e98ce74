package nft

import "sigs.k8s.io/knftables"

// txWriter is what reconcile writes a change into: a knftables transaction, or a changeSet.
type txWriter interface {
	Add(obj knftables.Object)
	Delete(obj knftables.Object)
	Flush(obj knftables.Object)
	NumOperations() int
}

// verb is what an operation does to its object.
type verb uint8

const (
	verbAdd verb = iota
	verbDelete
	verbFlush
)

// operation is one command of a change: a verb and the object it applies to.
type operation struct {
	verb verb
	obj  knftables.Object
}

// changeSet is one transaction's operations, in order, before it is written: as one nf_tables
// netlink batch when the writer encodes every operation (netlinkwrite.go), else through nft.
type changeSet struct{ ops []operation }

func (c *changeSet) Add(obj knftables.Object)    { c.ops = append(c.ops, operation{verbAdd, obj}) }
func (c *changeSet) Delete(obj knftables.Object) { c.ops = append(c.ops, operation{verbDelete, obj}) }
func (c *changeSet) Flush(obj knftables.Object)  { c.ops = append(c.ops, operation{verbFlush, obj}) }
func (c *changeSet) NumOperations() int          { return len(c.ops) }

// replay writes the operations into tx, in order.
func (c *changeSet) replay(tx *knftables.Transaction) {
	for _, op := range c.ops {
		switch op.verb {
		case verbAdd:
			tx.Add(op.obj)
		case verbDelete:
			tx.Delete(op.obj)
		case verbFlush:
			tx.Flush(op.obj)
		}
	}
}
