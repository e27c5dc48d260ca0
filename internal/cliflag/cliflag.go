// Package cliflag gives the commands (redlock exec and status in
// cmd/redlock, redlock chaos in the chaos module) one flag style: flags
// are named --name in errors and help, a duration without a unit is
// refused with the fix, and help lists the flags in one layout.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ParseDuration reads a duration such as 30s, 500ms or 1m. A number without
// a unit is refused with an error that says which units to add.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
		return 0, fmt.Errorf("a duration needs a unit: %ss, %sms or %sm", s, s, s)
	}
	return 0, errors.New("not a duration; want a number and a unit, such as 30s, 500ms or 1m")
}

// durationValue is a flag.Value read by ParseDuration.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := ParseDuration(s)
	*d = durationValue(v)
	return err
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

// DurationVar defines a duration flag on fs, as fs.DurationVar does, whose
// error for a number without a unit says to add one.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

// Duration is DurationVar with a new variable.
func Duration(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	DurationVar(fs, p, name, value, usage)
	return p
}

// The flag package's errors name a flag as -name.
var flagName = regexp.MustCompile(`(not defined: |needs an argument: |for flag |value "[^"]*" for )-([^\s:]+)`)

// Error returns err, a (*flag.FlagSet).Parse error, with every flag it
// names written --name ("invalid value "5" for --ttl: ..."); other errors
// as they are.
func Error(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := flagName.ReplaceAllString(err.Error(), "$1--$2")
	msg = strings.Replace(msg, "for flag --", "for --", 1)
	return errors.New(msg)
}

// PrintDefaults writes fs's flags to w, one per entry, in the layout of the
// commands' hand-written help:
//
//	--name ARG        usage, wrapped to 80 columns (default value)
//
// ARG is the name backquoted in the usage (as in [flag.UnquoteUsage]),
// DURATION for a duration, nothing for a boolean.
func PrintDefaults(w io.Writer, fs *flag.FlagSet) {
	const indent, width = 20, 80
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		if _, ok := f.Value.(*durationValue); ok && arg == "value" {
			arg = "duration"
		}
		head := "  --" + f.Name
		if arg != "" {
			head += " " + strings.ToUpper(arg)
		}
		if !zeroDefault(f.DefValue) {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		pad := indent - len(head)
		if pad < 2 { // a long head: the usage starts on the next line
			fmt.Fprintln(w, head)
			head, pad = "", indent
		}
		line, words := head+strings.Repeat(" ", pad), 0
		for _, word := range strings.Fields(usage) {
			if words > 0 && len(line)+1+len(word) > width {
				fmt.Fprintln(w, line)
				line, words = strings.Repeat(" ", indent), 0
			}
			if words > 0 {
				line += " "
			}
			line += word
			words++
		}
		fmt.Fprintln(w, line)
	})
}

// zeroDefault reports whether a flag's default is its type's zero value,
// which help does not show.
func zeroDefault(v string) bool {
	switch v {
	case "", "0", "false", "0s":
		return true
	}
	return false
}
