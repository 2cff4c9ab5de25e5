package sim

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Scripts run as Redis runs them: Lua 5.1 (gopher-lua), KEYS and ARGV as
// global tables, redis.call and redis.pcall on the master's keyspace
// with Redis's conversions both ways, the whole script at one instant of
// the master's clock.

// compiled holds each script source compiled once, by SHA1; a master
// makes its own function of it in its own Lua state.
var compiled sync.Map // sha -> *lua.FunctionProto

func compile(src string) (string, *lua.FunctionProto, error) {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	if p, ok := compiled.Load(sha); ok {
		return sha, p.(*lua.FunctionProto), nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "user_script")
	if err != nil {
		return "", nil, ReplyError("ERR Error compiling script (new function): " + err.Error())
	}
	p, err := lua.Compile(chunk, "user_script")
	if err != nil {
		return "", nil, ReplyError("ERR Error compiling script (new function): " + err.Error())
	}
	compiled.Store(sha, p)
	return sha, p, nil
}

// luaVM is a master's Lua state and the functions made in it.
type luaVM struct {
	ls  *lua.LState
	fns map[string]*lua.LFunction
	ks  *keyspace // the keyspace of the script running now
	m   *Master
}

func newLuaVM(m *Master) *luaVM {
	ls := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		ls.Push(ls.NewFunction(lib.fn))
		ls.Push(lua.LString(lib.name))
		ls.Call(1, 0)
	}
	vm := &luaVM{ls: ls, fns: map[string]*lua.LFunction{}, m: m}
	redis := ls.NewTable()
	ls.SetField(redis, "call", ls.NewFunction(func(ls *lua.LState) int { return vm.call(ls, false) }))
	ls.SetField(redis, "pcall", ls.NewFunction(func(ls *lua.LState) int { return vm.call(ls, true) }))
	ls.SetField(redis, "error_reply", ls.NewFunction(func(ls *lua.LState) int {
		t := ls.NewTable()
		t.RawSetString("err", lua.LString(ls.CheckString(1)))
		ls.Push(t)
		return 1
	}))
	ls.SetField(redis, "acl_check_cmd", ls.NewFunction(func(ls *lua.LState) int {
		ls.Push(lua.LTrue)
		return 1
	}))
	ls.SetGlobal("redis", redis)
	return vm
}

// run runs the script sha (which the master's cache holds) with keys and
// argv.
func (vm *luaVM) run(ks *keyspace, sha string, proto *lua.FunctionProto, keys, argv []string) (any, error) {
	fn := vm.fns[sha]
	if fn == nil {
		fn = vm.ls.NewFunctionFromProto(proto)
		vm.fns[sha] = fn
	}
	ls := vm.ls
	kt := ls.CreateTable(len(keys), 0)
	for i, k := range keys {
		kt.RawSetInt(i+1, lua.LString(k))
	}
	at := ls.CreateTable(len(argv), 0)
	for i, a := range argv {
		at.RawSetInt(i+1, lua.LString(a))
	}
	ls.SetGlobal("KEYS", kt)
	ls.SetGlobal("ARGV", at)
	vm.ks = ks
	defer func() { vm.ks = nil }()
	if err := ls.CallByParam(lua.P{Fn: fn, NRet: 1, Protect: true}); err != nil {
		ls.SetTop(0)
		msg := err.Error()
		var ae *lua.ApiError
		if errors.As(err, &ae) {
			msg = ae.Object.String()
		}
		if !strings.HasPrefix(msg, "ERR") && !strings.HasPrefix(msg, "WRONGTYPE") {
			msg = "ERR " + msg
		}
		return nil, ReplyError(msg + " script: " + sha)
	}
	ret := ls.Get(-1)
	ls.Pop(1)
	return fromLua(ret)
}

// call is redis.call (raising an error reply) and redis.pcall
// (returning it as {err=...}).
func (vm *luaVM) call(ls *lua.LState, protected bool) int {
	n := ls.GetTop()
	args := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		switch v := ls.Get(i).(type) {
		case lua.LString:
			args = append(args, string(v))
		case lua.LNumber:
			args = append(args, formatNumber(float64(v)))
		default:
			return vm.fail(ls, protected, "ERR Lua redis lib command arguments must be strings or integers")
		}
	}
	reply, err := vm.ks.exec(vm.m, args)
	if err != nil {
		return vm.fail(ls, protected, err.Error())
	}
	ls.Push(toLua(ls, reply))
	return 1
}

func (vm *luaVM) fail(ls *lua.LState, protected bool, msg string) int {
	if protected {
		t := ls.NewTable()
		ls.SetField(t, "err", lua.LString(msg))
		ls.Push(t)
		return 1
	}
	t := ls.NewTable()
	ls.SetField(t, "err", lua.LString(msg))
	ls.Error(t, 0)
	return 0
}

// formatNumber formats a Lua number as Redis passes it on to a command:
// an integer without a decimal point.
func formatNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e17 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// toLua converts a reply to Lua as Redis does: an integer to a number, a
// bulk string to a string, a null to false, an array to a table, a
// status to {ok=...}.
func toLua(ls *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return lua.LFalse
	case int64:
		return lua.LNumber(v)
	case []byte:
		return lua.LString(v)
	case string:
		t := ls.NewTable()
		ls.SetField(t, "ok", lua.LString(v))
		return t
	case []any:
		t := ls.CreateTable(len(v), 0)
		for i, e := range v {
			t.RawSetInt(i+1, toLua(ls, e))
		}
		return t
	}
	return lua.LFalse
}

// fromLua converts a script's return value to a reply as Redis does: a
// number to an integer (truncated), a string to a bulk string, true to 1,
// false and nil to a null, a table with err or ok to an error or status
// reply, another table to an array up to its first nil.
func fromLua(v lua.LValue) (any, error) {
	switch v := v.(type) {
	case lua.LNumber:
		return int64(v), nil
	case lua.LString:
		return []byte(v), nil
	case lua.LBool:
		if v {
			return int64(1), nil
		}
		return nil, nil
	case *lua.LTable:
		if e, ok := v.RawGetString("err").(lua.LString); ok {
			return nil, ReplyError(e)
		}
		if s, ok := v.RawGetString("ok").(lua.LString); ok {
			return status(s), nil
		}
		var out []any
		for i := 1; ; i++ {
			e := v.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			r, err := fromLua(e)
			if err != nil {
				out = append(out, err)
				continue
			}
			out = append(out, r)
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	}
	return nil, nil
}
