// Package failed is the operators' view of the Postgres table failed_sends: the
// authenticated admin HTTP API under /api/v1/failed, and the logic and output (tables
// and JSON) behind `rocketdelay failed …`. What is recorded there, and the retry job that
// re-sends pending rows, belong to package delivery.
//
// It reaches Postgres only through store.FailedSends; it never builds SQL, and neither
// its errors nor its HTTP answers carry SQL text, DSNs or tokens.
package failed
