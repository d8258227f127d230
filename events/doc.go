// Package events is the domain of task-service: the event envelope, one payload
// struct per event, the aggregates (Task, TaskType, User) as pure folds of their
// streams, the task state machine (decide: command -> events or a typed error)
// and the typed errors every other package maps from.
//
// It imports only the standard library. It never touches a database or the
// network: validation happens here before an event exists, and appliers never
// fail on valid history.
package events
