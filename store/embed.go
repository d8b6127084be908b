package store

import (
	"embed"
	"strings"

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

// scriptWith loads the Lua script lua/name after the functions of the libraries libs
// (lua/lib_*.lua files): lib_holding.lua for every script that changes who holds an id,
// lib_rate.lua for one that takes a rate, lib_done.lua for one that answers for an alert
// by its done marker, lib_pending.lua for one that lists or unlists a pending alert.
func scriptWith(name string, libs ...string) *redis.Script {
	var src strings.Builder
	for _, lib := range libs {
		src.WriteString(mustRead("lua/" + lib))
	}
	src.WriteString(mustRead("lua/" + name))
	return redis.NewScript(src.String())
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
