package store

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts (each starts with a comment listing its KEYS and ARGV) and the SQL
// queries live in files of their own, embedded here.
//
//go:embed lua/*.lua sql/*.sql
var files embed.FS

// script loads the Lua script lua/name; a missing file is a build mistake.
func script(name string) *redis.Script {
	return redis.NewScript(mustRead("lua/" + name))
}

// holdingScript loads the Lua script lua/name after the functions of lib_holding.lua,
// which every script that changes who holds an id calls.
func holdingScript(name string) *redis.Script {
	return redis.NewScript(mustRead("lua/lib_holding.lua") + mustRead("lua/"+name))
}

// rateScript loads the Lua script lua/name after the functions of lib_rate.lua, which
// every script that takes a rate calls.
func rateScript(name string) *redis.Script {
	return redis.NewScript(mustRead("lua/lib_rate.lua") + mustRead("lua/"+name))
}

// doneScript loads the Lua script lua/name after the functions of lib_done.lua, which
// every script that answers for an alert by its done marker calls.
func doneScript(name string) *redis.Script {
	return redis.NewScript(mustRead("lua/lib_done.lua") + mustRead("lua/"+name))
}

// asFunction is the Lua script lua/file as a local function name(KEYS, ARGV), for a
// script that runs several of them in one call (robot_settle.lua).
func asFunction(name, file string) string {
	return "local function " + name + "(KEYS, ARGV)\n" + mustRead("lua/"+file) + "\nend\n"
}

// query loads the SQL query sql/name; a missing file is a build mistake.
func query(name string) string { return mustRead("sql/" + name) }

func mustRead(path string) string {
	b, err := files.ReadFile(path)
	if err != nil {
		panic("store: missing embedded file " + path)
	}
	return string(b)
}
