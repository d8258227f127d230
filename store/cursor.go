package store

import (
	"encoding/base64"
	"strings"

	"github.com/clawdbot/task-service/events"
)

// encodeCursor is the keyset position after a row: its sort key and its id,
// opaque to clients. Every keyset list pages with it (field "after").
func encodeCursor(key, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(key + "|" + id))
}

// maxCursor bounds a cursor before it is decoded: the longest key (a name
// of 200 characters, at most 800 bytes of UTF-8), "|" and an id make 1,116
// characters of base64.
const maxCursor = 1200

// decodeCursor reads a cursor encodeCursor made; anything else is a 400
// naming "after". The id is last and never holds a "|", so the key may.
func decodeCursor(c string) (key, id string, err error) {
	bad := events.Invalid("after", "not a cursor from this list")
	if len(c) > maxCursor {
		return "", "", bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", "", bad
	}
	i := strings.LastIndexByte(string(raw), '|')
	if i < 0 || len(raw)-i-1 != 36 {
		return "", "", bad
	}
	return string(raw[:i]), string(raw[i+1:]), nil
}
