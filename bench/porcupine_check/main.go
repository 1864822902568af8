// Command porcupine_check decides one history with porcupine, as a whole
// process, for bench/checker.py's side-by-side figures.
//
// Input: JSON lines written by bench/porcupine_side.py, one operation each:
//
//	{"p": process, "c": call, "r": return (-1: unknown outcome), "f": "read"|"write"|"cas"|"append",
//	 "k": key, "a": argument, "b": cas new value, "o": output, "s": cas swapped}
//
// Values are opaque strings (the exporter renders them; "\u0000" is absent).
// The model is a register (or kv string) per key, with the same meanings as
// faultline's models: an operation of unknown outcome is legal anywhere and
// returns at the end of the history, so it may take effect late or never.
//
// Usage: porcupine_check [-nopart] [-timeout 120s] FILE
// Prints "linearizable", "not-linearizable" or "unknown", then the check
// time in seconds; exits 0.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

const absent = "\x00"

type op struct {
	P int    `json:"p"`
	C int64  `json:"c"`
	R int64  `json:"r"`
	F string `json:"f"`
	K string `json:"k"`
	A string `json:"a"`
	B string `json:"b"`
	O string `json:"o"`
	S bool   `json:"s"`
}

type input struct {
	f, key, arg, arg2 string
}

type output struct {
	known   bool
	value   string
	swapped bool
}

// step applies one operation to one key's value.
func step(state string, in input, out output) (bool, string) {
	switch in.f {
	case "read":
		return !out.known || out.value == state, state
	case "write":
		return true, in.arg
	case "append":
		if state == absent {
			return true, in.arg
		}
		return true, state + in.arg
	default: // cas
		if !out.known {
			if state == in.arg {
				return true, in.arg2
			}
			return true, state
		}
		if out.swapped {
			return state == in.arg, in.arg2
		}
		return state != in.arg, state
	}
}

// wholeMap is the unpartitioned state: sorted key=value pairs.
func wholeStep(state interface{}, i interface{}, o interface{}) (bool, interface{}) {
	m := state.(map[string]string)
	in := i.(input)
	cur, ok := m[in.key]
	if !ok {
		cur = absent
	}
	legal, next := step(cur, in, o.(output))
	if !legal {
		return false, state
	}
	if next == cur {
		return true, state
	}
	copied := make(map[string]string, len(m)+1)
	for k, v := range m {
		copied[k] = v
	}
	copied[in.key] = next
	return true, copied
}

func describeMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + m[k] + ";")
	}
	return b.String()
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

func models() (porcupine.Model, porcupine.Model) {
	perKey := porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var order []string
			for _, o := range history {
				k := o.Input.(input).key
				if _, ok := byKey[k]; !ok {
					order = append(order, k)
				}
				byKey[k] = append(byKey[k], o)
			}
			var parts [][]porcupine.Operation
			for _, k := range order {
				parts = append(parts, byKey[k])
			}
			return parts
		},
		Init: func() interface{} { return absent },
		Step: func(state interface{}, i interface{}, o interface{}) (bool, interface{}) {
			return step(state.(string), i.(input), o.(output))
		},
		Equal: func(a, b interface{}) bool { return a.(string) == b.(string) },
		Hash:  func(s interface{}) uint64 { return hash(s.(string)) },
	}
	whole := porcupine.Model{
		Init:  func() interface{} { return map[string]string{} },
		Step:  wholeStep,
		Equal: func(a, b interface{}) bool { return sameMap(a.(map[string]string), b.(map[string]string)) },
		Hash:  func(s interface{}) uint64 { return hash(describeMap(s.(map[string]string))) },
	}
	return perKey, whole
}

func main() {
	nopart := flag.Bool("nopart", false, "check the whole map at once (no partitioning by key)")
	timeout := flag.Duration("timeout", 120*time.Second, "give up (unknown) after this long")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: porcupine_check [-nopart] [-timeout D] FILE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var ops []op
	var end int64
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<26)
	for scanner.Scan() {
		var o op
		if err := json.Unmarshal(scanner.Bytes(), &o); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		ops = append(ops, o)
		if o.C > end {
			end = o.C
		}
		if o.R > end {
			end = o.R
		}
	}
	history := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		ret, known := o.R, o.R >= 0
		if !known {
			ret = end + 1
		}
		history = append(history, porcupine.Operation{
			ClientId: o.P, Input: input{o.F, o.K, o.A, o.B}, Call: o.C,
			Output: output{known, o.O, o.S}, Return: ret,
		})
	}
	perKey, whole := models()
	model := perKey
	if *nopart {
		model = whole
	}
	start := time.Now()
	result := porcupine.CheckOperationsTimeout(model, history, *timeout)
	elapsed := time.Since(start).Seconds()
	verdict := map[porcupine.CheckResult]string{
		porcupine.Ok: "linearizable", porcupine.Illegal: "not-linearizable", porcupine.Unknown: "unknown",
	}[result]
	fmt.Printf("%s %.6f\n", verdict, elapsed)
}
