// Package blob keeps opaque objects by key: the filesystem under a data
// directory (the default) or any S3-compatible bucket.
//
// It knows nothing of tasks or of the database: callers compose and
// validate keys (slash-separated relative paths). Its one promise is that
// nothing is ever visible at a key until the object is complete: a Writer
// shows its bytes at the key only on Commit, and what an abort or a crash
// leaves behind is pending data that SweepPending removes.
package blob
