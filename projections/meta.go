package projections

// ReadsMeta reports whether the rows of an event of this type read its
// Meta. Bulk replay decodes meta only for these: at a million events the
// JSON decoding of meta is a fifth of the fold. A test checks every event
// type against the row functions, so adding a Meta read without listing it
// here fails.
func ReadsMeta(eventType string) bool {
	switch eventType {
	case "task.assigned", "task.claimed", "task.released": // AssignmentRow: assigned_by
		return true
	}
	return false
}
