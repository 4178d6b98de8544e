package breaker

// size is how many breakers the table holds.
func (t *table) size() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.models)
}
