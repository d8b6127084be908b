// Package failed is what happens to an alert after the sender gave up on it: the retry
// job that re-sends the pending rows of the Postgres table failed_sends with exponential
// backoff until they are delivered or dead, its metrics, the authenticated admin HTTP
// API under /api/v1/failed, and the operator commands' logic and output (tables and
// JSON) behind `rocketdelay failed …`.
//
// It reaches Postgres only through store.FailedSends and DingTalk only through the small
// Sender interface it declares; it never builds SQL, and neither its errors nor its
// HTTP answers carry SQL text, DSNs or tokens.
package failed
