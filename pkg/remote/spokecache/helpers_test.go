package spokecache

// replaceObjects compacts objs and swaps them into s, as a list would.
func (s *kindStore) replaceObjects(objs []any, _ string) error {
	recs, err := compactAll(objs)
	if err != nil {
		return err
	}
	s.Replace(recs)
	return nil
}
