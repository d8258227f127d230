// Package ui is the admin web UI served by task-service at /: server-rendered
// html/template pages, htmx and a little plain JavaScript, all embedded
// (ADR 009).
//
// Pages read through the store's queries and act through api.Server's
// commands, exactly as the JSON API does: no SQL here and no second way to
// change anything. A page is three things: a handler file page_NAME.go, a
// template templates/views/NAME.html (defining "title" and "content"), and a
// line in routes() (plus one in nav when it belongs in the menu).
//
// Browsers log in with an HttpOnly, SameSite=Strict cookie holding the JWT;
// every state-changing request passes an Origin check and a CSRF token.
package ui
