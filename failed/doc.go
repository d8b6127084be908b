// Package failed is the operators' service on the Postgres table failed_sends, and on
// any alert by its id: the one place their questions and the store's answers are shaped.
// A listing is read with Query.Filter, a status to retry with ParseRetryStatus, a store
// error is turned into what a person reads with Answer, the counts with NewStatsView, a
// row's target with Targets.Describe (kind and destination), "where is my alert?" with
// Inspector (its state and history, from its trace and live state in Redis and its
// rows), and every way in cancels an alert with Canceller (the wheel stage, then its
// rows). The authenticated admin HTTP API under /api/v1/failed and /api/v1/alerts/{id}
// and the logic and output (tables and JSON) behind `rocketdelay failed …` and
// `rocketdelay inspect` live here; the web console (package console) calls the same
// functions. What is recorded there, and the retry job that re-sends pending rows,
// belong to package delivery.
//
// It reaches Postgres and Redis only through small interfaces (Store, Rows, Wheel,
// StageCanceller, RowCanceller, which package store implements); it never builds SQL,
// and neither its errors nor its HTTP answers carry SQL text, DSNs or tokens.
package failed
