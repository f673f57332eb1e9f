package spokecache

import (
	"sync"
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

// Add stores r, a record of an added or updated object, unless it differs from the record held
// in nothing but a numeric resourceVersion, which that record takes then.
func (s *kindStore) Add(r *record) {
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
}

// Delete drops the record of name.
func (s *kindStore) Delete(name string) {
	s.mu.Lock()
	_, had := s.items[name]
	delete(s.items, name)
	s.mu.Unlock()
	if had {
		s.changed()
	}
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

// Refresh is how a heartbeat is recognised: when the record of name was made from an object of
// this digest (nodeDigest for a Node), an event of the same digest would make the same record
// but for its resourceVersion, so Refresh stores rv in that record and reports true, and the
// event need not be decoded. It reports false, and stores nothing, when the store holds no
// such record, when that record has no digest or a resourceVersion that is not a number, or
// when rv is not a canonical decimal (etcd's always are): the event is decoded then.
func (s *kindStore) Refresh(name string, digest uint64, rv string) bool {
	v, ok := canonicalVersion(rv)
	if !ok {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.items[name]
	if r == nil || digest == 0 || r.digest != digest || r.rv.Load() == 0 {
		return false
	}
	r.rv.Store(v)
	return true
}
