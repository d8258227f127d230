// Package api is task-service's HTTP face: the echo server, JWT auth, strict
// request decoding, the handlers for workers and admins, the one error mapper,
// health and metrics, and the OpenAPI document built from the same route
// table that registers the handlers.
//
// Handlers decode and check input, call the store, and shape the envelope
// {"success": true, "data": ...}. They hold no state of their own beyond the
// compiled JSON Schemas cache and the user-name cache of event summaries.
// The one long-running part is the live tail's broadcaster (sse.go), started
// by Server.Run and stopped with its context.
package api
