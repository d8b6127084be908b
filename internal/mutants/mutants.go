// Package mutants is the curated list of mutations that `make mutants` applies to the
// source one at a time: each breaks an invariant the service promises, and the tests it
// names must then fail. A mutant that survives (its tests pass) is an invariant nothing
// checks; one whose original text is gone is a list that fell behind the code. Both fail
// the run (internal/cmd/mutants).
package mutants

// Mutant is one mutation: in File, the text From (which must occur exactly once) becomes
// To, and `go test -run Tests Package` must fail.
type Mutant struct {
	// Name is a short unique id.
	Name string
	// Invariant is what the mutation breaks, as the docs promise it.
	Invariant string
	// File is the file's path from the repository's root.
	File string
	// From is the original text, To its replacement.
	From, To string
	// Package is the package whose tests judge it (./store), or several separated by
	// spaces; Tests the -run pattern.
	Package, Tests string
}
