// Package failed is the operators' service on the Postgres table failed_sends, the one
// place their questions and the store's answers are shaped: a listing is read with
// Query.Filter, a status to retry with ParseRetryStatus, a store error is turned into
// what a person reads with Answer, the counts with NewStatsView. The authenticated admin
// HTTP API under /api/v1/failed and the logic and output (tables and JSON) behind
// `rocketdelay failed …` live here; the web console (package console) calls the same
// functions. What is recorded there, and the retry job that re-sends pending rows,
// belong to package delivery.
//
// It reaches Postgres only through a Store (store.FailedSends implements it); it never
// builds SQL, and neither its errors nor its HTTP answers carry SQL text, DSNs or tokens.
package failed
