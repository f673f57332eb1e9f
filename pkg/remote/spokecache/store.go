package spokecache

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
)

// kindStore is one kind's records by name (Machines and MachineSets are all in one namespace),
// filled by its kindLoop. It holds no client: the loop reads through the kind's KindClient,
// and the Spoke's live reads and patches go through theirs.
type kindStore struct {
	spec   kindSpec
	notify func()

	mu     sync.RWMutex
	items  map[string]*record
	synced chan struct{} // closed by the first Replace
	once   sync.Once
}

func (s *kindStore) Add(obj any) error {
	if _, ok := obj.(*unchangedNode); ok {
		return nil // its resourceVersion is stored already (sameDigest)
	}
	r, err := compact(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := s.items[r.name()]
	differs := old == nil || r.shareWith(old)
	kept := !differs && old.takeVersion(r)
	if kept {
		old.digest = r.digest // the message's, so that the next heartbeat is recognised
	} else {
		s.items[r.name()] = r // after shareWith: the key is then cut from the string r keeps
	}
	s.mu.Unlock()
	if differs {
		s.changed()
	}
	return nil
}

func (s *kindStore) Delete(obj any) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	name := m.GetName()
	s.mu.Lock()
	_, had := s.items[name]
	delete(s.items, name)
	s.mu.Unlock()
	if had {
		s.changed()
	}
	return nil
}

// Replace swaps in the records of a fresh list. The first one marks the kind synced (the
// connect is notified by the Manager); a later one (a re-list) notifies if anything differs.
func (s *kindStore) Replace(list []*record) {
	s.mu.RLock()
	old := s.items // only this kind's loop writes the store, so old stays what it is
	s.mu.RUnlock()
	items := make(map[string]*record, len(list))
	differs := len(old) != len(list)
	for _, r := range list {
		o := old[r.name()]
		if o == nil || r.shareWith(o) {
			differs = true
		} else if o.takeVersion(r) {
			items[r.name()] = o
			continue
		}
		items[r.name()] = r // after shareWith, as in Add
	}
	s.mu.Lock()
	s.items = items
	s.mu.Unlock()
	first := false
	s.once.Do(func() { first = true; close(s.synced) })
	if !first && differs {
		s.changed()
	}
}

func (s *kindStore) changed() {
	select {
	case <-s.synced:
		s.notify()
	default: // still listing: the connect notification covers it
	}
}

// sameDigest stores rv in the record of Node name, and reports true, when that record was made
// from a message of this digest (nodeDigest): a message of the same digest makes the same record
// but for its resourceVersion, so it need not be decoded. A resourceVersion that is not a
// canonical decimal (etcd's always are) is left to the decoding.
func (s *kindStore) sameDigest(name string, digest uint64, rv string) bool {
	v, ok := canonicalVersion(rv)
	if !ok {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.items[name]
	if r == nil || r.digest != digest || r.rv.Load() == 0 {
		return false
	}
	r.rv.Store(v)
	return true
}
