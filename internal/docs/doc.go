// Package docs holds the test that keeps the repository's markdown honest: every relative
// link resolves (to a file of the repository, and to a heading where it names one) and
// every command a code block shows names a real rocketdelay subcommand and flags, make
// target or Go package. It has no code of its own.
package docs
