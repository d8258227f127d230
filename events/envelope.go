package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// Stream types.
const (
	StreamTask     = "task"
	StreamTaskType = "task_type"
	StreamUser     = "user"
)

// ActorKind says who caused an event.
type ActorKind string

const (
	ActorAdmin  ActorKind = "admin"
	ActorWorker ActorKind = "worker"
	ActorSystem ActorKind = "system"
	// ActorTelegram is a person writing to the bot: ID is "telegram:" and
	// their Telegram user id, Name their @username or first name.
	ActorTelegram ActorKind = "telegram"
)

// Actor is who caused an event: a user (admin or worker), a part of the
// system (the retry reactor, the stuck detector) named by ID, or a
// Telegram user.
type Actor struct {
	Kind ActorKind `json:"kind"`
	ID   string    `json:"id"`
	// Name is how a Telegram user called themselves when they acted (users
	// of this service are named from the users table instead).
	Name string `json:"name,omitempty"`
}

// System returns the actor for an automatic decision made by component.
func System(component string) Actor { return Actor{Kind: ActorSystem, ID: component} }

// Meta travels with every event.
type Meta struct {
	Actor         Actor  `json:"actor"`
	RequestID     string `json:"request_id,omitempty"`
	CausationSeq  int64  `json:"causation_seq,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
}

// Payload is one event's data. Each event type has exactly one payload struct.
type Payload interface {
	EventType() string
}

// Envelope is one stored event.
type Envelope struct {
	Seq           int64
	TxID          uint64
	StreamType    string
	StreamID      string
	Version       int
	Type          string
	SchemaVersion int
	Data          json.RawMessage
	Meta          Meta
	OccurredAt    time.Time
	Payload       Payload
}

// Position is a consumer's place in the log: events are read in (TxID, Seq)
// order, see DESIGN §2. Its string form is opaque to clients.
type Position struct {
	TxID uint64
	Seq  int64
}

// Position returns the envelope's position in the log.
func (e Envelope) Position() Position { return Position{TxID: e.TxID, Seq: e.Seq} }

func (p Position) String() string { return fmt.Sprintf("%d-%d", p.TxID, p.Seq) }

// ParsePosition reads the String form; "" is the start of the log.
func ParsePosition(s string) (Position, error) {
	var p Position
	if s == "" || s == "0" {
		return p, nil
	}
	if _, err := fmt.Sscanf(s, "%d-%d", &p.TxID, &p.Seq); err != nil || p.String() != s {
		return Position{}, Invalid("after", "not a position: %q", s)
	}
	return p, nil
}

// Less orders positions as consumers read them.
func (p Position) Less(q Position) bool {
	return p.TxID < q.TxID || (p.TxID == q.TxID && p.Seq < q.Seq)
}

// New wraps a payload for appending; the store fills Seq, TxID and Version.
func New(streamType, streamID string, p Payload, meta Meta, at time.Time) Envelope {
	return Envelope{
		StreamType:    streamType,
		StreamID:      streamID,
		Type:          p.EventType(),
		SchemaVersion: 1,
		Meta:          meta,
		OccurredAt:    at.UTC(),
		Payload:       p,
	}
}

// Decode fills Payload from Type and Data, upcasting old schema versions.
func (e *Envelope) Decode() error {
	decode, ok := registry[e.Type]
	if !ok {
		return fmt.Errorf("decode event %d: unknown type %q", e.Seq, e.Type)
	}
	p, err := decode(e.Data)
	if err != nil {
		return fmt.Errorf("decode event %d (%s): %w", e.Seq, e.Type, err)
	}
	e.Payload = p
	return nil
}

// Types lists every known event type in registration order.
func Types() []string { return append([]string(nil), typeNames...) }

// KnownType reports whether name is an event type.
func KnownType(name string) bool { _, ok := registry[name]; return ok }

// registry is filled once at init and only read afterwards.
var (
	registry  = map[string]func([]byte) (Payload, error){}
	typeNames []string
)

func register[T Payload]() {
	var zero T
	name := zero.EventType()
	registry[name] = func(b []byte) (Payload, error) {
		var v T
		err := json.Unmarshal(b, &v)
		return v, err
	}
	typeNames = append(typeNames, name)
}

// StreamVersion is the version of the last event folded into the aggregate.
func (t *Task) StreamVersion() int { return t.Version }

// StreamVersion is the version of the last event folded into the aggregate.
func (tt *TaskType) StreamVersion() int { return tt.Version }

// StreamVersion is the version of the last event folded into the aggregate.
func (u *User) StreamVersion() int { return u.Version }
